#!/usr/bin/env bash
# Install Debian's PostgreSQL server binaries when missing (the tests start their own cluster).
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "note: PostgreSQL is not installed and cannot be installed here; its tests will skip" >&2
  exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
