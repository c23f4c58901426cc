#!/usr/bin/env bash
# Build a local Docker image containing Debian's redis-server, without pulling
# anything from a registry.
#
# The image (default name redlock-redis:7, override with REDLOCK_REDIS_IMAGE)
# holds only the dereferenced redis-server binary, every shared library ldd
# lists for it, the dynamic loader, an empty /data working dir and /tmp. It is
# assembled as a root filesystem tarball and loaded with `docker import`, so no
# base image and no builder (BuildKit/buildx) are needed.
#
# Usage: scripts/redis-image.sh [--force]
#   --force  rebuild even if the image already exists
# Prints the image name on stdout when done.
set -euo pipefail

IMAGE="${REDLOCK_REDIS_IMAGE:-redlock-redis:7}"
FORCE=0
for arg in "$@"; do
	case "$arg" in
	--force) FORCE=1 ;;
	-h | --help)
		sed -n '2,14p' "$0"
		exit 0
		;;
	*)
		echo "redis-image.sh: unknown argument: $arg" >&2
		exit 2
		;;
	esac
done

log() { echo "redis-image.sh: $*" >&2; }

command -v docker >/dev/null 2>&1 || {
	log "docker CLI not found"
	exit 1
}

if [[ $FORCE -eq 0 ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
	log "image $IMAGE already exists (use --force to rebuild)"
	echo "$IMAGE"
	exit 0
fi

if ! command -v redis-server >/dev/null 2>&1; then
	log "redis-server not found, installing the Debian package"
	SUDO=""
	if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends redis-server >/dev/null
fi

# /usr/bin/redis-server is a symlink to redis-check-rdb and Redis chooses its
# mode from argv[0], so copy the real file under the name redis-server.
BIN="$(readlink -f "$(command -v redis-server)")"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
ROOT="$WORK/rootfs"
mkdir -p "$ROOT/usr/bin" "$ROOT/data" "$ROOT/tmp"
chmod 1777 "$ROOT/tmp"
cp -L "$BIN" "$ROOT/usr/bin/redis-server"

# Shared libraries ("name => /path (addr)") and the loader ("/path (addr)"),
# copied dereferenced to the same absolute paths inside the image.
mapfile -t LIBS < <(ldd "$BIN" | awk '
	$2 == "=>" && $3 ~ /^\// { print $3; next }
	$1 ~ /^\// { print $1 }
')
if [[ ${#LIBS[@]} -eq 0 ]]; then
	log "ldd listed no libraries for $BIN (static binary?), continuing"
fi
for lib in "${LIBS[@]}"; do
	mkdir -p "$ROOT$(dirname "$lib")"
	cp -L "$lib" "$ROOT$lib"
done

VERSION="$("$ROOT/usr/bin/redis-server" --version 2>/dev/null || true)"
log "building $IMAGE from $BIN (${VERSION:-unknown version}), ${#LIBS[@]} libraries"

tar --numeric-owner --owner=0 --group=0 -C "$ROOT" -cf - . |
	docker import \
		--change 'ENTRYPOINT ["/usr/bin/redis-server"]' \
		--change 'CMD ["--protected-mode", "no", "--save", "", "--appendonly", "no", "--dir", "/data"]' \
		--change 'WORKDIR /data' \
		--change 'EXPOSE 6379' \
		--message "redis-server from the Debian package (${VERSION:-unknown})" \
		- "$IMAGE" >/dev/null

echo "$IMAGE"
