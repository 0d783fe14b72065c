#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Prints the Debian mirror apt already uses on this machine (deb822 sources
# first, then sources.list), or Debian's own redirector when it names none:
# where a fresh bookworm comes from (scripts/deb-test.sh,
# scripts/docker-base.sh). DEBIAN_MIRROR, when set, wins.
#   scripts/debian-mirror.sh            the archive (.../debian)
#   scripts/debian-mirror.sh security   the security archive (.../debian-security;
#                                       DEBIAN_SECURITY_MIRROR wins)
set -eu
case "${1:-}" in
"") dir=debian; m=${DEBIAN_MIRROR:-} ;;
security) dir=debian-security; m=${DEBIAN_SECURITY_MIRROR:-} ;;
*) echo "usage: debian-mirror.sh [security]" >&2; exit 2 ;;
esac
[ -n "$m" ] || m=$(sed -n "s|^URIs:[[:space:]]*\([^[:space:]]*/$dir\)/*\$|\1|p" \
	/etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
[ -n "$m" ] || m=$(sed -n "s|^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*/$dir\)/\?[[:space:]]\+bookworm[-a-z]*[[:space:]].*|\2|p" \
	/etc/apt/sources.list 2>/dev/null | head -n 1)
echo "${m:-http://deb.debian.org/$dir}"
