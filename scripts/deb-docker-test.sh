#!/bin/sh
# Builds the Debian package in a container made from debian:12 (the base
# image of the compose stack, scripts/docker-base.sh) and installs it in
# another, fresh one, then checks what an operator would: `apt install
# ./spoa-ratelimit_*.deb` pulls what it needs from Debian's archive, the
# files and the unit are there and enabled, the rules file is a conffile
# and valid, the installed agent listens and answers a SPOP HELLO, stops
# cleanly on SIGTERM, and purge removes it. systemd does not run in a
# container: the unit's enablement is its symlink, the agent is started by
# hand. The agent listens on the host's loopback (--network host), where
# the check speaks to it. The containers and their image layers go
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
cleanup() {
	rc=$?
	docker rm -f "$NAME-build" "$NAME-install" >/dev/null 2>&1 || true
	[ $rc = 0 ] && echo "deb-docker-test: PASS ($(( $(date +%s) - START ))s)" ||
		echo "deb-docker-test: FAIL ($(( $(date +%s) - START ))s)" >&2
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
step() { echo "== $*"; }

rm -rf "$OUT" && mkdir -p "$OUT"
step "make deb in a $IMAGE container"
# the tree without build output or git, through stdin: nothing of the
# host is mounted into the build but the output directory
(cd "$ROOT_SRC" && tar -cf - --exclude=./build --exclude=./.git .) |
	timeout 1200 docker run -i --rm --name "$NAME-build" --label "$LABEL" \
		-v "$OUT:/out" "$IMAGE" /bin/sh -ec '
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends build-essential debhelper \
			libev-dev libhiredis-dev libyaml-dev pkg-config > /dev/null
		mkdir /src && tar -xf - -C /src && cd /src
		make deb > /out/build.log 2>&1 || { tail -n 40 /out/build.log; exit 1; }
		cp build/deb/*.deb /out/
		chown -R '"$(id -u):$(id -g)"' /out'
DEB=$(ls "$OUT"/spoa-ratelimit_*.deb | head -n 1)
[ -f "$DEB" ] || { echo "no package built" >&2; exit 1; }
echo "  $(basename "$DEB")"

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
	/lib/systemd/system/spoa-ratelimit.service /usr/share/man/man8/spoa-ratelimit.8.gz; do
	inc test -e "$f" || { echo "missing $f" >&2; exit 1; }
	echo "  $f"
done
inc grep -qx /etc/spoa-ratelimit/rules.yaml /var/lib/dpkg/info/spoa-ratelimit.conffiles ||
	{ echo "rules.yaml is not a conffile" >&2; exit 1; }
inc test -L /etc/systemd/system/multi-user.target.wants/spoa-ratelimit.service ||
	{ echo "the unit is not enabled" >&2; exit 1; }
echo "  enabled: /etc/systemd/system/multi-user.target.wants/spoa-ratelimit.service"

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

step "apt-get purge"
inc apt-get purge -y -q spoa-ratelimit > /dev/null
if inc test -e /etc/spoa-ratelimit/rules.yaml || inc test -e /usr/sbin/spoa-ratelimit; then
	echo "purge left files" >&2
	exit 1
fi
echo "  removed"
