#!/bin/sh
# Installs the Debian 12 packages that building, testing, the benchmarks and
# the demo need, when any is missing. Safe to run again.
set -eu
PKGS="build-essential pkg-config clang libclang-rt-14-dev haproxy redis-server
redis-sentinel redis-tools libev-dev libhiredis-dev libcmocka-dev
libyaml-dev python3 curl docker-compose faketime groff-base valgrind wrk
prometheus"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
