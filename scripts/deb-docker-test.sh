#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Builds the Debian package in a container made from debian:12 (the base
# image of the compose stack, scripts/docker-base.sh) with nothing but
# make installed (`make deb` installs its build dependencies), runs
# lintian on it (an error fails), and installs it in another, fresh one,
# then checks what an operator would: `apt install ./spoa-ratelimit_*.deb`
# pulls what it needs from Debian's archive, the files and the unit are
# there and enabled, the rules file is a conffile and valid, the guides
# and the integration are in /usr/share/doc/spoa-ratelimit with no path
# relative to HAProxy's directory (scripts/check-installed-paths.py),
# Debian's HAProxy accepts each installed haproxy.cfg once the SPOE files
# and maps are copied into /etc/haproxy, the installed agent listens and
# answers a SPOP HELLO, decides the requests of HAProxy running the
# installed basic.cfg (scripts/haproxy-limit-check.py), stops cleanly on
# SIGTERM, and purge removes it. systemd does not run in a container: the
# unit's enablement is its symlink, the agent is started by hand. The
# agent and HAProxy listen on the host's loopback (--network host), where
# the checks speak to them. The containers and their image layers go
# whatever happens; debian:12 stays.
#   scripts/deb-docker-test.sh [OUTDIR]    the .deb is left in OUTDIR (build/deb-docker)
set -eu
ROOT_SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT_SRC/build/deb-docker}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)  # docker -v wants an absolute path
IMAGE=debian:12
LABEL=spoa-ratelimit.deb-test
START=$(date +%s)
"$ROOT_SRC/scripts/docker-engine.sh"
"$ROOT_SRC/scripts/docker-base.sh" "$IMAGE"

NAME=spoa-deb-test-$$
TMP=$(mktemp -d /tmp/spoa-deb-docker-test.XXXXXX)
cleanup() {
	rc=$?
	docker rm -f "$NAME-build" "$NAME-install" >/dev/null 2>&1 || true
	rm -rf "$TMP"
	[ $rc = 0 ] && echo "deb-docker-test: PASS ($(( $(date +%s) - START ))s)" ||
		echo "deb-docker-test: FAIL ($(( $(date +%s) - START ))s)" >&2
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
step() { echo "== $*"; }

rm -rf "$OUT" && mkdir -p "$OUT"
step "make deb in a $IMAGE container with only make installed, then lintian"
# the tree without build output or git, through stdin: nothing of the
# host is mounted into the build but the output directory
(cd "$ROOT_SRC" && tar -cf - --exclude=./build --exclude=./.git .) |
	timeout 1800 docker run -i --rm --name "$NAME-build" --label "$LABEL" \
		-v "$OUT:/out" "$IMAGE" /bin/sh -ec '
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends make > /dev/null
		mkdir /src && tar -xf - -C /src && cd /src
		make deb > /out/build.log 2>&1 || { tail -n 40 /out/build.log; exit 1; }
		cp build/deb/*.deb /out/
		apt-get install -y -qq --no-install-recommends lintian > /dev/null
		st=0
		lintian --fail-on error --display-info --pedantic build/deb/*.changes \
			> /out/lintian.log 2>&1 || st=$?
		chown -R '"$(id -u):$(id -g)"' /out
		exit $st' || { sed 's/^/  lintian: /' "$OUT/lintian.log" 2>/dev/null; exit 1; }
DEB=$(ls "$OUT"/spoa-ratelimit_*.deb | head -n 1)
[ -f "$DEB" ] || { echo "no package built" >&2; exit 1; }
echo "  $(basename "$DEB")"
# (lintian notes that it runs as root; what it says of the package follows)
grep -v 'running with root privileges' "$OUT/lintian.log" | sed 's/^/  lintian: /' || true

step "apt install ./$(basename "$DEB") in a fresh $IMAGE container"
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
docker run -d --name "$NAME-install" --label "$LABEL" --network host \
	-v "$OUT:/deb:ro" "$IMAGE" sleep 600 > /dev/null
inc() { docker exec "$NAME-install" "$@"; }
timeout 600 docker exec -e DEBIAN_FRONTEND=noninteractive "$NAME-install" /bin/sh -ec "
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends /deb/$(basename "$DEB") > /dev/null"

step "files and unit"
for f in /usr/sbin/spoa-ratelimit /etc/spoa-ratelimit/rules.yaml \
	/lib/systemd/system/spoa-ratelimit.service /usr/share/man/man8/spoa-ratelimit.8.gz \
	/usr/share/bash-completion/completions/spoa-ratelimit; do
	inc test -e "$f" || { echo "missing $f" >&2; exit 1; }
	echo "  $f"
done
inc grep -qx /etc/spoa-ratelimit/rules.yaml /var/lib/dpkg/info/spoa-ratelimit.conffiles ||
	{ echo "rules.yaml is not a conffile" >&2; exit 1; }
inc test -L /etc/systemd/system/multi-user.target.wants/spoa-ratelimit.service ||
	{ echo "the unit is not enabled" >&2; exit 1; }
echo "  enabled: /etc/systemd/system/multi-user.target.wants/spoa-ratelimit.service"

DOC=/usr/share/doc/spoa-ratelimit
step "the guides and the integration in $DOC"
# Every guide (compressed by the package, or not when small), and every
# file of the integration and of bench-figures/ under its installed name,
# as it is: what the source tree has, named from its root.
guides=$(cd "$ROOT_SRC" && echo README.md BENCHMARKS.md docs/*.md)
integration=$(cd "$ROOT_SRC" && echo examples/*.yaml dashboards/*.json \
	dashboards/provisioning/* alerts/* bench-figures/* &&
	for f in haproxy-examples/*; do echo "examples/haproxy/${f#*/}"; done &&
	for f in spoe-conf/*.conf; do echo "examples/haproxy/spoe-${f#*/}"; done)
for f in $guides; do
	inc /bin/sh -c "test -f $DOC/$f || test -f $DOC/$f.gz" || { echo "missing $DOC/$f" >&2; exit 1; }
done
for f in $integration; do
	inc test -f "$DOC/$f" || { echo "missing $DOC/$f" >&2; exit 1; }
done
echo "  $(echo $guides | wc -w) guides, $(echo $integration | wc -w) integration files and figures"
inc grep -qx 'License: Apache-2.0' $DOC/copyright &&
	inc grep -q /usr/share/common-licenses/Apache-2.0 $DOC/copyright ||
	{ echo "$DOC/copyright does not say Apache-2.0" >&2; exit 1; }
echo "  $DOC/copyright: Apache-2.0"
docker cp "$NAME-install:$DOC" "$TMP/doc"
python3 "$ROOT_SRC/scripts/check-installed-paths.py" "$TMP/doc" /etc/haproxy ||
	{ echo "the installed examples name relative paths" >&2; exit 1; }
echo "  no relative path in examples/, dashboards/, alerts/"

step "HAProxy with the installed examples"
# (ca-certificates, which the package recommends: tls.cfg trusts the
# system's CAs, @system-ca, unless RL_AGENT_CA names a file)
# Services never start from maintainer scripts here (none could: no systemd).
inc /bin/sh -c "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d"
timeout 600 docker exec -e DEBIAN_FRONTEND=noninteractive "$NAME-install" /bin/sh -ec "
	apt-get install -y -qq --no-install-recommends haproxy ca-certificates > /dev/null"
echo "  $(inc haproxy -v | head -n 1)"
# as the man page says: the SPOE files and maps into /etc/haproxy
inc /bin/sh -c "cd $DOC/examples/haproxy && cp spoe-ratelimit*.conf *.map /etc/haproxy/"
for cfg in $(inc /bin/sh -c "ls $DOC/examples/haproxy/*.cfg"); do
	# from /, with no RL_* variable: the defaults, absolute, are what it reads
	inc /bin/sh -c "cd / && haproxy -c -f $cfg > /dev/null" ||
		{ echo "haproxy -c -f $cfg failed" >&2; exit 1; }
	echo "  haproxy -c: $cfg"
done

step "the installed agent"
inc /usr/sbin/spoa-ratelimit --version
inc /usr/sbin/spoa-ratelimit --check -f /etc/spoa-ratelimit/rules.yaml
docker exec -d "$NAME-install" /bin/sh -c "echo \$\$ > /tmp/agent.pid; \
	exec /usr/sbin/spoa-ratelimit -f /etc/spoa-ratelimit/rules.yaml -l 127.0.0.1:$PORT \
	-t 1 > /tmp/agent.log 2>&1"
i=0
until inc grep -q "listening on" /tmp/agent.log 2>/dev/null; do
	i=$((i + 1))
	[ $i -le 100 ] || { inc cat /tmp/agent.log >&2; exit 1; }
	sleep 0.1
done
python3 "$ROOT_SRC/scripts/spop-hello.py" "$PORT"
# (minbase has no procps: the shell's kill, and /proc)
PID=$(inc cat /tmp/agent.pid)
inc /bin/sh -c "kill -TERM $PID"
i=0
while inc test -e "/proc/$PID"; do
	i=$((i + 1))
	[ $i -le 50 ] || { echo "the agent did not stop on SIGTERM" >&2; exit 1; }
	sleep 0.1
done
inc grep -q "stopped" /tmp/agent.log || { inc cat /tmp/agent.log >&2; exit 1; }
inc sed 's/^/  agent: /' /tmp/agent.log

step "a request through HAProxy and the installed agent"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
AGENT=$(free_port); FRONT=$(free_port); APP=$(free_port); STATS=$(free_port)
docker exec -d "$NAME-install" /bin/sh -c "exec /usr/sbin/spoa-ratelimit --limit 2/1m \
	-l 127.0.0.1:$AGENT -t 1 > /tmp/agent-limit.log 2>&1"
i=0
until inc grep -q "listening on" /tmp/agent-limit.log 2>/dev/null; do
	i=$((i + 1))
	[ $i -le 100 ] || { inc cat /tmp/agent-limit.log >&2; exit 1; }
	sleep 0.1
done
# the installed basic.cfg as it is; only its addresses from RL_*
docker exec -d -e RL_FRONTEND=127.0.0.1:$FRONT -e RL_APP=127.0.0.1:$APP \
	-e RL_AGENT=127.0.0.1:$AGENT -e RL_STATS=127.0.0.1:$STATS "$NAME-install" \
	/bin/sh -c "cd / && exec haproxy -db -f $DOC/examples/haproxy/basic.cfg > /tmp/haproxy.log 2>&1"
python3 "$ROOT_SRC/scripts/haproxy-limit-check.py" "$FRONT" "$APP" 60 ||
	{ inc cat /tmp/haproxy.log /tmp/agent-limit.log >&2; exit 1; }

step "apt-get purge"
inc apt-get purge -y -q spoa-ratelimit > /dev/null
if inc test -e /etc/spoa-ratelimit/rules.yaml || inc test -e /usr/sbin/spoa-ratelimit ||
	inc test -e $DOC; then
	echo "purge left files" >&2
	exit 1
fi
echo "  removed"
