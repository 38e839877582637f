#!/usr/bin/env bash
# Builds the test-server image from Debian's packages, with no container registry:
# debootstrap a Debian trixie root file system with PostgreSQL 17 and MariaDB 11.8,
# prepare one data directory for each, and `docker import` it.
#
#   docker/build-images.sh            # build unless the image exists
#   CHATLEDGER_REBUILD=1 docker/build-images.sh   # rebuild the image (reuses the root fs)
#
# Packages come from the Debian mirror this machine's own apt already uses (the first
# Debian archive in /etc/apt/sources.list, then /etc/apt/sources.list.d/*.list and
# *.sources), or from CHATLEDGER_DEBIAN_MIRROR: the repository names no mirror.
# The debootstrap output is cached outside the repository (CHATLEDGER_IMAGE_CACHE,
# default /var/cache/chatledger) and reused; the image is skipped when it exists.
# Bump RECIPE when anything below changes: it names both the cache and the tag.
# The image's servers are started by tests/support/containers.py with an explicit command
# (no entrypoint conventions): see SERVER_COMMANDS there.
set -euo pipefail

RECIPE=1
IMAGE="${CHATLEDGER_SERVER_IMAGE:-chatledger-servers:trixie-r$RECIPE}"
CACHE="${CHATLEDGER_IMAGE_CACHE:-/var/cache/chatledger}"
ROOTFS="$CACHE/rootfs-trixie-r$RECIPE"

# The URI of the first enabled "deb" source that is not a security archive: from the
# one-line format (deb [options] URI SUITE COMPONENTS...) or from deb822 stanzas
# (Types:, URIs:, Suites:, Enabled:), whichever comes first in apt's order.
apt_mirror() {
  local file
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*; do
    [ -r "$file" ] || continue
    case "$file" in
    *.list)
      awk '$1 == "deb" {
             i = 2
             if ($i ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
             if ($(i + 1) !~ /-security$/ && $i !~ /-security\/?$/) { print $i; exit }
           }' "$file" ;;
    *.sources)
      awk 'BEGIN { RS = "" }
           {
             types = uris = suites = ""; enabled = "yes"
             n = split($0, lines, "\n")
             for (j = 1; j <= n; j++) {
               line = lines[j]
               if (line ~ /^[ \t]*#/) continue
               key = tolower(line); sub(/:.*/, "", key)
               value = line; sub(/^[^:]*:[ \t]*/, "", value)
               if (key == "types") types = value
               else if (key == "uris") uris = value
               else if (key == "suites") suites = value
               else if (key == "enabled") enabled = tolower(value)
             }
             split(uris, uri, /[ \t]+/)
             if (enabled != "no" && (" " types " ") ~ / deb / && uri[1] != "" &&
                 suites !~ /^[^ ]*-security( |$)/ && uri[1] !~ /-security\/?$/) { print uri[1]; exit }
           }' "$file" ;;
    esac | head -n 1 | grep . && return 0
  done
  return 1
}

MIRROR="${CHATLEDGER_DEBIAN_MIRROR:-}"

if [ -z "${CHATLEDGER_REBUILD:-}" ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "image $IMAGE exists; not rebuilt"
  exit 0
fi

command -v debootstrap >/dev/null || {
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}

if [ ! -e "$ROOTFS/.chatledger-complete" ]; then
  if [ -z "$MIRROR" ]; then
    MIRROR="$(apt_mirror)" || {
      echo "no Debian mirror in this machine's apt sources; set CHATLEDGER_DEBIAN_MIRROR" >&2
      exit 1
    }
  fi
  echo "debootstrap trixie from $MIRROR into $ROOTFS (several minutes) ..."
  rm -rf "$ROOTFS.partial"
  mkdir -p "$CACHE"
  debootstrap --variant=minbase --include=postgresql-17,mariadb-server,galera-4 \
    trixie "$ROOTFS.partial" "$MIRROR" >"$CACHE/debootstrap-r$RECIPE.log" 2>&1 || {
    tail -n 30 "$CACHE/debootstrap-r$RECIPE.log" >&2
    exit 1
  }
  in_root() { chroot "$ROOTFS.partial" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
  # The package's own cluster (pg_createcluster may have given it port 5433) is not
  # used: the image gets one data directory per server, each started on the port
  # the test chooses.
  in_root pg_dropcluster --stop 17 main || true
  mkdir -p "$ROOTFS.partial/var/lib/chatledger/postgresql"
  in_root chown postgres:postgres /var/lib/chatledger/postgresql
  in_root su postgres -s /bin/sh -c \
    "/usr/lib/postgresql/17/bin/initdb --no-sync --auth=trust --username=postgres --encoding=UTF8 \
     --locale=C -D /var/lib/chatledger/postgresql" >/dev/null
  # Test only: any client address may connect without a password.
  echo "host all all 0.0.0.0/0 trust" >>"$ROOTFS.partial/var/lib/chatledger/postgresql/pg_hba.conf"
  in_root mariadb-install-db --no-defaults --user=mysql --datadir=/var/lib/chatledger/mariadb \
    --auth-root-authentication-method=normal --skip-test-db >/dev/null
  rm -rf "$ROOTFS.partial"/var/cache/apt/archives/*.deb "$ROOTFS.partial"/var/lib/apt/lists/*
  touch "$ROOTFS.partial/.chatledger-complete"
  mv "$ROOTFS.partial" "$ROOTFS"
fi

echo "docker import $ROOTFS as $IMAGE ..."
tar --numeric-owner -C "$ROOTFS" -c . | docker import \
  -c 'ENV PATH=/usr/lib/postgresql/17/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'ENV LANG=C.UTF-8' \
  - "$IMAGE" >/dev/null
docker run --rm --network=none "$IMAGE" sh -c 'postgres --version && mariadbd --version'
