#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Makes the image every Dockerfile of the compose stack builds FROM
# (debian:12) when Docker does not have it yet: pulled where a registry is
# reachable, else made from Debian's archive alone, with
# `debootstrap --variant=minbase bookworm` from the mirror apt already uses
# (scripts/debian-mirror.sh), its apt sources set as in Debian's own image
# (bookworm, bookworm-updates, bookworm-security), then `docker import`.
# An image that is there is kept. Root (or sudo) for debootstrap.
#   scripts/docker-base.sh [IMAGE]        IMAGE: debian:12 unless given
set -eu
IMAGE=${1:-debian:12}
ROOT_SRC=$(cd "$(dirname "$0")/.." && pwd)
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
	echo "docker-base: $IMAGE is there"
	exit 0
fi
echo "docker-base: docker pull $IMAGE"
if timeout "${DOCKER_PULL_TIMEOUT:-120}" docker pull "$IMAGE"; then
	exit 0
fi

MIRROR=$("$ROOT_SRC/scripts/debian-mirror.sh")
SECURITY=$("$ROOT_SRC/scripts/debian-mirror.sh" security)
command -v debootstrap >/dev/null || {
	echo "docker-base: installing debootstrap"
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends debootstrap
}
DIR=$(mktemp -d /tmp/spoa-docker-base.XXXXXX)
cleanup() {
	rc=$?
	# debootstrap mounts /proc and /sys in the tree while it works; never
	# remove a tree that still has something mounted in it.
	if grep -q " $DIR/" /proc/self/mounts; then
		echo "docker-base: mounts left under $DIR, not removing it" >&2
	else
		$SUDO rm -rf "$DIR"
	fi
	rm -f "$DIR.log"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "docker-base: no registry; debootstrap --variant=minbase bookworm from $MIRROR"
START=$(date +%s)
timeout 900 $SUDO debootstrap --variant=minbase bookworm "$DIR" "$MIRROR" > "$DIR.log" 2>&1 ||
	{ tail -n 20 "$DIR.log" >&2; exit 1; }
$SUDO sh -eu -c '
	rm -f "$1/etc/apt/sources.list"
	cat > "$1/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $2
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $3
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
	# Nothing of this machine goes into the image: Docker provides the
	# name and the resolver of each container; downloaded packages, lists
	# and logs only make the image larger.
	: > "$1/etc/hostname"
	: > "$1/etc/resolv.conf"
	rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*
	find "$1/var/log" -type f -delete
' sh "$DIR" "$MIRROR" "$SECURITY"
$SUDO tar -C "$DIR" -c . | docker import --change 'CMD ["bash"]' - "$IMAGE" >/dev/null
echo "docker-base: $IMAGE imported ($(( $(date +%s) - START )) s)"
