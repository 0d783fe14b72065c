#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages that building, testing, the benchmarks and
# the demo need, when any is missing. Safe to run again.
#   scripts/install-deps.sh         everything `make test` and `make demo` use
#   scripts/install-deps.sh deb     what `make deb` uses: the compiler,
#                                   dpkg-dev and the Build-Depends of
#                                   debian/control
set -eu
ROOT_SRC=$(cd "$(dirname "$0")/.." && pwd)
case ${1:-all} in
all)
	PKGS="build-essential pkg-config clang libclang-rt-14-dev haproxy redis-server
redis-sentinel redis-tools libev-dev libhiredis-dev libcmocka-dev libssl-dev openssl
libyaml-dev python3 curl docker-compose faketime groff-base valgrind wrk
prometheus" ;;
deb)
	# Build-Depends read from debian/control, so that the two never
	# differ: the field's lines up to the next field, one package per
	# comma, without versions or architectures, the first of
	# alternatives; debhelper-compat is a virtual package of debhelper.
	PKGS="build-essential dpkg-dev $(awk '
		/^Build-Depends:/ { f = 1; sub(/^Build-Depends:/, ""); print; next }
		f && /^[ \t]/ { print; next }
		{ f = 0 }' "$ROOT_SRC/debian/control" |
		tr ',' '\n' | sed -e 's/|.*//' -e 's/[[(<].*//' -e 's/^[ \t]*//' -e 's/[ \t]*$//' \
			-e 's/^debhelper-compat$/debhelper/' | grep -v '^$' | tr '\n' ' ')" ;;
*)
	echo "usage: install-deps.sh [deb]" >&2
	exit 2 ;;
esac
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq -o DPkg::Lock::Timeout=300
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=300 \
	--no-install-recommends $missing
