#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Makes a Docker engine ready for the compose stack (`make compose-test`):
# installs Debian's docker.io, docker-compose and debootstrap when any is
# missing, then starts dockerd when `docker info` fails (in the background,
# its own session, logging to $DOCKERD_LOG, default /var/log/dockerd.log)
# and waits for it. A dockerd started here keeps running afterwards, as one
# started by the system would: `kill "$(cat /var/run/docker.pid)"` stops it.
# Safe to run again.
set -eu
PKGS="docker.io docker-compose debootstrap"
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/dockerd.log}
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "docker-engine: installing$missing"
	$SUDO apt-get update -qq -o DPkg::Lock::Timeout=300
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=300 \
		--no-install-recommends $missing
fi

docker info >/dev/null 2>&1 && exit 0
echo "docker-engine: starting dockerd (log: $DOCKERD_LOG)"
$SUDO sh -c 'setsid dockerd >>"$1" 2>&1 </dev/null &' sh "$DOCKERD_LOG"
i=0
until docker info >/dev/null 2>&1; do
	i=$((i + 1))
	if [ $i -gt 60 ]; then
		echo "docker-engine: dockerd did not answer within 60 s; the end of $DOCKERD_LOG:" >&2
		$SUDO tail -n 20 "$DOCKERD_LOG" >&2 || true
		exit 1
	fi
	sleep 1
done
echo "docker-engine: dockerd is up"
