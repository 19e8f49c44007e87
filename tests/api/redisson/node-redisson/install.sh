#!/usr/bin/env bash
# Installs node-redisson (pinned by package-lock.json, from the npm registry) with port.js into
# DEST (tests/api/redisson/ports.rs passes a folder of the target dir), once: a second run
# with the same lock file does nothing, and concurrent runs (nextest's test processes) wait for
# the first. Installs Node and npm (Debian's packages) when missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
dest=$1
command -v node >/dev/null && command -v npm >/dev/null || "$root/.ci/ensure-packages" nodejs npm
mkdir -p "$dest"
exec 9> "$dest/.install.lock"
flock 9
stamp=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$dest/.installed" 2>/dev/null)" != "$stamp" ]; then
  cp "$here/package.json" "$here/package-lock.json" "$dest/"
  (cd "$dest" && npm ci --legacy-peer-deps --no-audit --no-fund --loglevel=error >&2)
  echo "$stamp" > "$dest/.installed"
fi
cp "$here/port.js" "$dest/"
