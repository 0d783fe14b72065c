#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs the package in a fresh Debian 12 (debootstrap --variant=minbase
# bookworm in a temporary directory), then checks what an operator would:
# the unit is installed and enabled, the rules file is valid, the agent
# listens and answers a SPOP HELLO, purge removes it. systemd does not run
# in a chroot: the unit is checked with `systemctl --root`, the agent is
# run by hand. Needs root and the Debian mirror apt already uses; nothing
# else leaves loopback. The chroot is removed whatever happens.
#   scripts/deb-test.sh build/deb/spoa-ratelimit_VERSION_ARCH.deb
set -eu
DEB=${1:?usage: deb-test.sh PACKAGE.deb}
[ -f "$DEB" ] || { echo "deb-test: no $DEB" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "deb-test: needs root (debootstrap, chroot)" >&2; exit 1; }
ROOT_SRC=$(cd "$(dirname "$0")/.." && pwd)
command -v debootstrap >/dev/null || {
	echo "installing debootstrap"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
}

MIRROR=$("$ROOT_SRC/scripts/debian-mirror.sh")

DIR=$(mktemp -d /tmp/spoa-deb-test.XXXXXX)
AGENT_PID=
cleanup() {
	rc=$?
	[ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null
	for m in "$DIR/proc" "$DIR/dev/pts"; do
		mountpoint -q "$m" 2>/dev/null && { umount "$m" || umount -l "$m"; }
	done
	# Never remove a tree that still has something mounted in it.
	if grep -q " $DIR/" /proc/self/mounts; then
		echo "deb-test: mounts left under $DIR, not removing it" >&2
	else
		rm -rf "$DIR"
	fi
	[ $rc = 0 ] && echo "deb-test: PASS ($(( $(date +%s) - START ))s)" ||
		echo "deb-test: FAIL ($(( $(date +%s) - START ))s)" >&2
	exit $rc
}
START=$(date +%s)
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { echo "== $*"; }
inroot() { chroot "$DIR" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
	DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }

step "debootstrap --variant=minbase bookworm from $MIRROR"
timeout 900 debootstrap --variant=minbase bookworm "$DIR" "$MIRROR" > "$DIR.log" 2>&1 ||
	{ tail -n 20 "$DIR.log" >&2; rm -f "$DIR.log"; exit 1; }
rm -f "$DIR.log"
cp /etc/resolv.conf "$DIR/etc/resolv.conf"
mount -t proc proc "$DIR/proc"
mount -t devpts devpts "$DIR/dev/pts" 2>/dev/null || true   # apt's log; optional
# Services never start from maintainer scripts here (none could: no systemd).
printf '#!/bin/sh\nexit 101\n' > "$DIR/usr/sbin/policy-rc.d"
chmod 755 "$DIR/usr/sbin/policy-rc.d"
cp "$DEB" "$DIR/tmp/"
PKG=/tmp/$(basename "$DEB")

step "apt-get install $PKG"
timeout 600 chroot "$DIR" /bin/sh -c "apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $PKG"

step "files and unit"
for f in /usr/sbin/spoa-ratelimit /etc/spoa-ratelimit/rules.yaml \
	/lib/systemd/system/spoa-ratelimit.service /usr/share/man/man8/spoa-ratelimit.8.gz; do
	[ -e "$DIR$f" ] || { echo "missing $f" >&2; exit 1; }
	echo "  $f"
done
grep -qx /etc/spoa-ratelimit/rules.yaml "$DIR/var/lib/dpkg/info/spoa-ratelimit.conffiles" ||
	{ echo "rules.yaml is not a conffile" >&2; exit 1; }
en=$(systemctl --root="$DIR" is-enabled spoa-ratelimit.service || true)
echo "  systemctl --root is-enabled: $en"
[ "$en" = enabled ] || exit 1

step "the installed agent"
inroot /usr/sbin/spoa-ratelimit --version
inroot /usr/sbin/spoa-ratelimit --check -f /etc/spoa-ratelimit/rules.yaml
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LOG="$DIR/tmp/agent.log"
timeout 30 chroot "$DIR" /usr/sbin/spoa-ratelimit -f /etc/spoa-ratelimit/rules.yaml \
	-l "127.0.0.1:$PORT" -t 1 > "$LOG" 2>&1 &
AGENT_PID=$!
i=0
until grep -q "listening on" "$LOG"; do
	i=$((i + 1))
	[ $i -le 50 ] && kill -0 $AGENT_PID 2>/dev/null || { cat "$LOG" >&2; exit 1; }
	sleep 0.1
done
python3 "$ROOT_SRC/scripts/spop-hello.py" "$PORT"
kill -TERM $AGENT_PID
st=0; wait $AGENT_PID || st=$?
AGENT_PID=
sed 's/^/  agent: /' "$LOG"
[ $st = 0 ] || { echo "the agent exited $st after SIGTERM" >&2; exit 1; }

step "apt-get purge"
inroot apt-get purge -y -q spoa-ratelimit > /dev/null
[ ! -e "$DIR/etc/spoa-ratelimit/rules.yaml" ] && [ ! -e "$DIR/usr/sbin/spoa-ratelimit" ] ||
	{ echo "purge left files" >&2; exit 1; }
echo "  removed"
