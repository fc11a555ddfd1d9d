#!/usr/bin/env bash
# Install KafkaJS (npm, the version tests/kafkajs/package-lock.json pins) into
# tests/kafkajs/node_modules for the KafkaJS conformance test
# (tests/integration/kafka/test_kafkajs.py): `npm ci` from the committed lockfile. Idempotent:
# does nothing when the pinned version is installed. Installs Node.js and npm (Debian's
# packages) when they are missing.
set -euo pipefail

dir="$(cd "$(dirname "$0")/../tests/kafkajs" && pwd)"
missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
source "$(dirname "$0")/_apt.sh"
apt_install setup-kafkajs "the KafkaJS test (Node.js 14+ and npm)" "${missing[@]}"
want="$(node -p 'require(process.argv[1]).packages["node_modules/kafkajs"].version' \
  "$dir/package-lock.json")"
have="$(node -p 'try { require(process.argv[1]).version } catch (e) { "" }' \
  "$dir/node_modules/kafkajs/package.json")"
if [[ "$have" == "$want" ]]; then
  exit 0
fi
echo "==> npm ci: kafkajs $want into tests/kafkajs/node_modules" >&2
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
