# SPDX-License-Identifier: Apache-2.0
# spoa-ratelimit build. Plain make; objects and binaries go to $(BUILD).
#   make            the agent at build/spoa-ratelimit, and the tools
#   make test       unit tests, fuzz corpus replays, end-to-end tests
#   make asan       the whole suite under AddressSanitizer (build/asan)
#   make ubsan      the whole suite under UndefinedBehaviorSanitizer
#   make fuzz       libFuzzer runs of every fuzz target (clang), bounded
#   make bench      SPOP and HTTP load against the agent, HAProxy -> BENCHMARKS.md
#                   (BENCH_HAPROXY=haproxy,/usr/local/bin/haproxy34: the
#                   HAProxy binaries the HAProxy rows run on, a table each)
#   make demo       HAProxy + agent + Redis on loopback, with traffic
#   make compose-test  docker-compose.yml built from debian:12 and run, the
#                   demo's checks through its published ports, then removed
#                   (Docker; root or sudo: installs docker.io, starts dockerd)
#   make install    the agent, its man page, bash completion, systemd unit
#                   and rules file,
#                   the guides and the integration examples with installed
#                   paths (PREFIX=/usr/local, DESTDIR=); make uninstall
#   make deb        a Debian package in build/deb/ (debhelper; installs the
#                   build dependencies when missing)
#   make deb-test   that package installed and started in a fresh Debian 12
#                   chroot (debootstrap; root, network to the mirror)
#   make deb-docker-test  the package built in a debian:12 container and
#                   checked by lintian, installed in a fresh one, its
#                   files and examples checked, started behind HAProxy
#                   (Docker, as compose-test)

BUILD ?= build
CC ?= cc
OPT ?= -O2 -g
PYTHON ?= python3
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wpointer-arith -Wundef \
	-Wswitch-enum -Wno-unused-parameter
ifeq ($(CI),true)
WERROR ?= -Werror
endif
SAN ?=
PKG_CFLAGS := $(shell pkg-config --cflags hiredis yaml-0.1 openssl 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs hiredis yaml-0.1 openssl 2>/dev/null)
CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null || echo -lcmocka)

# Each folder of agent/ is one layer, from the ground up: base, protocol,
# policy, rules, decide, store, store/redis, worker, ops; agent/ itself
# holds only the top (main). A folder includes headers of its own and of
# the folders below it, never above (docs/development.md, checked by
# tests/docs/test_docs.py).
AGENT_DIRS := agent/base agent/protocol agent/policy agent/rules agent/decide agent/store \
	agent/store/redis agent/worker agent/ops agent
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) $(WERROR) $(SAN) -pthread \
	$(addprefix -I,$(AGENT_DIRS)) -I$(BUILD)/gen $(PKG_CFLAGS) $(CFLAGS)
ALL_LDFLAGS = $(SAN) -pthread $(LDFLAGS)
LIBS = -lev $(PKG_LIBS) -lm

AGENT_SRCS := $(foreach d,$(AGENT_DIRS),$(wildcard $(d)/*.c))
AGENT_OBJS := $(AGENT_SRCS:%.c=$(BUILD)/%.o)
AGENT_BIN := $(BUILD)/spoa-ratelimit

.PHONY: all agent tools test unit fuzz-replay e2e sizes asan ubsan fuzz bench demo \
	compose-test clean deps check check-build install install-doc uninstall deb deb-deps deb-test \
	deb-docker-test
all: agent tools

agent: $(AGENT_BIN)

# Rebuild everything when the compiler or its flags change.
FLAGS_FILE := $(BUILD)/.flags
FLAGS_NOW := $(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS)
$(shell mkdir -p $(BUILD); \
	[ "$$(cat $(FLAGS_FILE) 2>/dev/null)" = '$(FLAGS_NOW)' ] || \
	echo '$(FLAGS_NOW)' > $(FLAGS_FILE))

$(BUILD)/%.o: %.c $(FLAGS_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# The Redis decision library becomes a C string. `?` is escaped so that
# no "??x" in Lua turns into a C trigraph.
LUA_LIBRARY := agent/store/redis/ratelimit.lua
$(BUILD)/gen/redis_library.h: $(LUA_LIBRARY)
	@mkdir -p $(dir $@)
	{ echo '/* generated from $(LUA_LIBRARY) */'; \
	  echo "static const char redis_library[] ="; \
	  cat $^ | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/?/\\?/g' \
	      -e 's/^/"/' -e 's/$$/\\n"/'; \
	  echo ';'; } > $@.tmp && mv $@.tmp $@
$(BUILD)/agent/store/redis/redis_node.o: $(BUILD)/gen/redis_library.h

$(AGENT_BIN): $(AGENT_OBJS)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS)

# ---- tools ------------------------------------------------------------------
# Each tools/NAME.mk adds NAME to TOOLS and sets NAME_SRCS.
TOOLS :=
include $(wildcard tools/*.mk)
define tool_rule
$(BUILD)/$(1): $$(patsubst %.c,$(BUILD)/%.o,$$($(1)_SRCS))
	$$(CC) $$(ALL_LDFLAGS) -o $$@ $$^ $$(LIBS)
endef
$(foreach t,$(TOOLS),$(eval $(call tool_rule,$(t))))
tools: $(addprefix $(BUILD)/,$(TOOLS))

# The rules as loaded from a file: what a test or fuzzer that loads rules links.
RULES_SRCS := agent/rules/rules_load.c agent/rules/rules_stack.c agent/rules/rules_extras.c agent/rules/rules_adaptive.c agent/rules/rules_charge.c agent/rules/rules_match.c agent/rules/rules_derive.c agent/rules/rules_seen.c agent/rules/rules_classify.c agent/base/sha256.c agent/rules/urlpath.c agent/rules/settings.c agent/base/addr.c \
	agent/rules/yaml_strict.c agent/policy/shed.c agent/policy/adaptive.c agent/policy/limit.c agent/policy/rlheader.c

# ---- unit tests (cmocka): one binary per module ------------------------------
# Each tests/unit/NAME.mk adds NAME to UNIT_TESTS and sets test_NAME_SRCS to
# the test file plus only the agent sources under test.
UNIT_TESTS :=
include $(wildcard tests/unit/*.mk)
define unit_rule
$(BUILD)/tests/test_$(1): $$(patsubst %.c,$(BUILD)/%.o,$$(test_$(1)_SRCS))
	@mkdir -p $$(dir $$@)
	$$(CC) $$(ALL_LDFLAGS) -o $$@ $$^ $$(test_$(1)_LDFLAGS) $(CMOCKA_LIBS) $$(LIBS)
endef
$(foreach t,$(UNIT_TESTS),$(eval $(call unit_rule,$(t))))
UNIT_BINS := $(addprefix $(BUILD)/tests/test_,$(UNIT_TESTS))

unit: $(UNIT_BINS)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; $$t; done

# ---- fuzz targets -------------------------------------------------------------
# Each tests/fuzz/NAME.mk adds NAME to FUZZERS and sets fuzz_NAME_SRCS. With
# gcc (make test) they link tests/fuzz/replay.c, a main that replays
# tests/fuzz/corpus/NAME/*; `make fuzz` links libFuzzer instead (clang).
FUZZERS :=
include $(wildcard tests/fuzz/*.mk)
define fuzz_rule
$(BUILD)/fuzz/replay_$(1): $$(patsubst %.c,$(BUILD)/%.o,$$(fuzz_$(1)_SRCS) tests/fuzz/replay.c)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(ALL_LDFLAGS) -o $$@ $$^ $$(LIBS)
endef
$(foreach f,$(FUZZERS),$(eval $(call fuzz_rule,$(f))))
REPLAY_BINS := $(addprefix $(BUILD)/fuzz/replay_,$(FUZZERS))

fuzz-replay: $(REPLAY_BINS)
	@set -e; for f in $(FUZZERS); do \
		echo "== replay $$f"; $(BUILD)/fuzz/replay_$$f tests/fuzz/corpus/$$f; done

FUZZ_SECONDS ?= 60
fuzz:
	@set -e; for f in $(FUZZERS); do \
		$(MAKE) --no-print-directory BUILD=build/fuzz CC=clang \
			SAN="-fsanitize=fuzzer-no-link,address,undefined" \
			build/fuzz/libfuzzer_$$f; \
		mkdir -p build/fuzz/corpus_$$f; \
		build/fuzz/libfuzzer_$$f -max_total_time=$(FUZZ_SECONDS) \
			build/fuzz/corpus_$$f tests/fuzz/corpus/$$f; done
define libfuzzer_rule
$(BUILD)/libfuzzer_$(1): $$(patsubst %.c,$(BUILD)/%.o,$$(fuzz_$(1)_SRCS))
	$$(CC) $$(ALL_LDFLAGS) -fsanitize=fuzzer -o $$@ $$^ $$(LIBS)
endef
$(foreach f,$(FUZZERS),$(eval $(call libfuzzer_rule,$(f))))

# ---- end-to-end ---------------------------------------------------------------
# The runner runs E2E_JOBS tests at once (default: twice the CPUs; see
# docs/development.md), those of E2E_DIRS.
E2E_ARGS ?=
E2E_DIRS ?= tests/e2e tests/docs tests/ops tests/bench tests/compose
e2e: agent tools
	$(PYTHON) tests/e2e/run.py --build $(BUILD) $(E2E_ARGS) $(E2E_DIRS)

# `make test` and `make demo` first install missing Debian packages (a
# no-op when all are there), then run.
test: deps
	$(MAKE) check
# check builds everything it runs at once (-j as many as CPUs, unless make
# was given a -j), then runs the size check, the unit tests, the fuzz
# replays and the end-to-end suite, one after the other: each is parallel
# within (the suite), or takes seconds.
NPROC := $(shell nproc 2>/dev/null || echo 2)
check:
	$(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j$(NPROC)) check-build
	$(MAKE) --no-print-directory sizes unit fuzz-replay e2e
check-build: agent tools $(UNIT_BINS) $(REPLAY_BINS)

# No file of agent/ over 1,000 lines, no function over 120 (tests/sizes.py).
sizes:
	$(PYTHON) tests/sizes.py

# Sanitizer builds run the same suite against their own objects, built and
# run in parallel as check does.
asan:
	$(MAKE) BUILD=build/asan OPT="-O1 -g" \
		SAN="-fsanitize=address -fno-omit-frame-pointer" check
ubsan:
	$(MAKE) BUILD=build/ubsan OPT="-O1 -g" \
		SAN="-fsanitize=undefined -fno-sanitize-recover=all" check

bench: agent tools
	$(PYTHON) bench/run.py --build $(BUILD) $(if $(BENCH_HAPROXY),--haproxy $(BENCH_HAPROXY))

demo: deps
	$(MAKE) agent
	$(PYTHON) tools/demo.py --build $(BUILD)

# The engine first (docker.io installed, dockerd started when it does not
# answer), then debian:12 when Docker lacks it (pulled, else debootstrap),
# then the stack: built, checked, taken down with its images.
compose-test:
	scripts/docker-engine.sh
	scripts/docker-base.sh
	$(PYTHON) tests/compose/run.py

deps:
	scripts/install-deps.sh

# ---- install ------------------------------------------------------------------
# The agent is a system daemon started by systemd, documented in section 8:
# sbin, as haproxy and redis-server. The rules file is configuration, in
# /etc whatever the PREFIX; an existing one is never replaced. The unit goes
# where systemd reads units of the prefix: /lib/systemd/system for the
# distribution's /usr (Debian 12 has no units in /usr/lib yet),
# PREFIX/lib/systemd/system otherwise (/usr/local/lib/systemd/system is on
# systemd's search path).
PREFIX ?= /usr/local
DESTDIR ?=
SBINDIR ?= $(PREFIX)/sbin
MAN8DIR ?= $(PREFIX)/share/man/man8
SYSCONFDIR ?= /etc
SYSTEMDUNITDIR ?= $(if $(filter /usr,$(PREFIX)),/lib/systemd/system,$(PREFIX)/lib/systemd/system)
DOCDIR ?= $(PREFIX)/share/doc/spoa-ratelimit
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
HAPROXYDIR ?= $(SYSCONFDIR)/haproxy
INSTALL ?= install

install: agent install-doc
	$(INSTALL) -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(MAN8DIR) \
		$(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSCONFDIR)/spoa-ratelimit \
		$(DESTDIR)$(BASHCOMPDIR)
	$(INSTALL) -m 755 $(AGENT_BIN) $(DESTDIR)$(SBINDIR)/spoa-ratelimit
	$(INSTALL) -m 644 dist/spoa-ratelimit.8 $(DESTDIR)$(MAN8DIR)/spoa-ratelimit.8
	$(INSTALL) -m 644 dist/spoa-ratelimit.bash-completion \
		$(DESTDIR)$(BASHCOMPDIR)/spoa-ratelimit
	sed 's|@SBINDIR@|$(SBINDIR)|g' dist/spoa-ratelimit.service.in \
		> $(DESTDIR)$(SYSTEMDUNITDIR)/spoa-ratelimit.service.tmp
	chmod 644 $(DESTDIR)$(SYSTEMDUNITDIR)/spoa-ratelimit.service.tmp
	mv $(DESTDIR)$(SYSTEMDUNITDIR)/spoa-ratelimit.service.tmp \
		$(DESTDIR)$(SYSTEMDUNITDIR)/spoa-ratelimit.service
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/spoa-ratelimit/rules.yaml ]; then \
		echo "keeping $(DESTDIR)$(SYSCONFDIR)/spoa-ratelimit/rules.yaml"; \
	else \
		echo "$(INSTALL) -m 644 examples/rules.yaml $(DESTDIR)$(SYSCONFDIR)/spoa-ratelimit/rules.yaml"; \
		$(INSTALL) -m 644 examples/rules.yaml $(DESTDIR)$(SYSCONFDIR)/spoa-ratelimit/rules.yaml; \
	fi

# The guides as in the source tree, under DOCDIR: README.md and docs/
# side by side, so that their links hold, BENCHMARKS.md with its figures.
# Then the integration, its paths made those of an installed system by
# dist/installed-paths.sed (never relative to HAProxy's directory):
#   examples/            the rules examples
#   examples/haproxy/    the haproxy.cfg examples, and what they read from
#                        HAPROXYDIR: the SPOE files (spoe-conf/NAME.conf
#                        as spoe-NAME.conf) and the maps
#   dashboards/ alerts/  Grafana and Prometheus
DOC_FILES := README.md BENCHMARKS.md $(wildcard CHANGELOG.md)
INSTALLED_PATHS := $(BUILD)/installed-paths.sed
install-doc:
	$(INSTALL) -d $(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(DOCDIR)/bench-figures \
		$(DESTDIR)$(DOCDIR)/examples/haproxy $(DESTDIR)$(DOCDIR)/dashboards/provisioning \
		$(DESTDIR)$(DOCDIR)/alerts
	$(INSTALL) -m 644 $(DOC_FILES) $(DESTDIR)$(DOCDIR)/
	$(INSTALL) -m 644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	$(INSTALL) -m 644 bench-figures/*.svg $(DESTDIR)$(DOCDIR)/bench-figures/
	@mkdir -p $(dir $(INSTALLED_PATHS))
	sed -e 's|@DOCDIR@|$(DOCDIR)|g' -e 's|@SBINDIR@|$(SBINDIR)|g' \
		-e 's|@HAPROXYDIR@|$(HAPROXYDIR)|g' dist/installed-paths.sed > $(INSTALLED_PATHS)
	@set -e; d=$(DESTDIR)$(DOCDIR); \
	for f in examples/*.yaml haproxy-examples/*.cfg haproxy-examples/*.map \
		spoe-conf/*.conf dashboards/*.json dashboards/provisioning/*.yaml alerts/*.yml; do \
		case $$f in \
		haproxy-examples/*) to=$$d/examples/haproxy/$${f#*/} ;; \
		spoe-conf/*) to=$$d/examples/haproxy/spoe-$${f#*/} ;; \
		*) to=$$d/$$f ;; \
		esac; \
		echo "sed -f $(INSTALLED_PATHS) $$f > $$to"; \
		sed -f $(INSTALLED_PATHS) $$f > $$to.tmp; chmod 644 $$to.tmp; mv $$to.tmp $$to; \
	done

# The rules file goes only when it is still the example: edited, it stays.
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/spoa-ratelimit $(DESTDIR)$(MAN8DIR)/spoa-ratelimit.8 \
		$(DESTDIR)$(SYSTEMDUNITDIR)/spoa-ratelimit.service \
		$(DESTDIR)$(BASHCOMPDIR)/spoa-ratelimit
	rm -rf $(addprefix $(DESTDIR)$(DOCDIR)/,$(DOC_FILES) docs bench-figures examples \
		dashboards alerts)
	rmdir $(DESTDIR)$(DOCDIR) 2>/dev/null || true
	@f=$(DESTDIR)$(SYSCONFDIR)/spoa-ratelimit/rules.yaml; \
	if [ -e $$f ] && ! cmp -s examples/rules.yaml $$f; then echo "keeping $$f (edited)"; \
	else rm -f $$f; rmdir $(DESTDIR)$(SYSCONFDIR)/spoa-ratelimit 2>/dev/null || true; fi

# ---- Debian package -----------------------------------------------------------
# Built from a copy of the sources in build/deb/, so that the tree stays
# clean and dpkg-buildpackage's output (written to the parent directory)
# lands in build/deb/. debian/changelog must carry the agent's version.
# The build dependencies (debian/control's, dpkg-dev) are installed first
# when any is missing, as `make test` installs its own.
VERSION = $(shell sed -n 's/^\#define RL_VERSION "\(.*\)"/\1/p' agent/main.c)
DEB_SRC = build/deb/spoa-ratelimit-$(VERSION)
deb-deps:
	scripts/install-deps.sh deb
deb: deb-deps
	@v=$$(dpkg-parsechangelog -S Version | sed 's/-[^-]*$$//'); \
	[ "$$v" = "$(VERSION)" ] || { echo "debian/changelog is at $$v, the agent at $(VERSION)"; exit 1; }
	rm -rf build/deb && mkdir -p $(DEB_SRC)
	tar -cf - --exclude=./build --exclude=./.git . | tar -xf - -C $(DEB_SRC)
	cd $(DEB_SRC) && dpkg-buildpackage -us -uc -b
	@ls -l build/deb/*.deb

deb-test: deb
	scripts/deb-test.sh build/deb/spoa-ratelimit_$(VERSION)-*.deb

deb-docker-test:
	scripts/deb-docker-test.sh $(BUILD)/deb-docker

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
