#!/usr/bin/env bash
# Start N controllers (the metadata quorum) on 127.0.0.1 in the foreground.
# Usage: ./scripts/start-quorum.sh [N=3] [DATA_DIR=./var/quorum] [BASE_PORT=9301]
# Node i listens on BASE_PORT+i-1 with data under DATA_DIR/controller-i (config written
# there as controller.toml; logs in controller.log). Ctrl-C stops them all.
set -euo pipefail
N="${1:-3}"
DIR="${2:-./var/quorum}"
BASE="${3:-9301}"
source "$(dirname "$0")/_env.sh"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
QUORUM=""
for i in $(seq 1 "$N"); do
    QUORUM="${QUORUM:+$QUORUM,}$i@127.0.0.1:$((BASE + i - 1))"
done
PIDS=()
cleanup() {
    trap - INT TERM EXIT
    echo "stopping controllers: ${PIDS[*]:-}" >&2
    for p in "${PIDS[@]:-}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT
for i in $(seq 1 "$N"); do
    d="$DIR/controller-$i"
    mkdir -p "$d"
    cat > "$d/controller.toml" <<TOML
node_id = $i
roles = ["controller"]
listen = "127.0.0.1:$((BASE + i - 1))"
controller_quorum = "$QUORUM"
data_dir = "$d/data"
TOML
    longboat controller start --config "$d/controller.toml" >"$d/controller.log" 2>&1 &
    PIDS+=($!)
    echo "controller $i: pid $! http://127.0.0.1:$((BASE + i - 1)) (log $d/controller.log)" >&2
done
BOOT="http://127.0.0.1:$BASE"
for _ in $(seq 1 100); do
    if longboat quorum status --bootstrap "$BOOT" >/dev/null 2>&1; then break; fi
    sleep 0.2
done
longboat quorum status --bootstrap "$BOOT" || echo "(no leader yet; see the logs)" >&2
echo >&2
echo "Try:  longboat quorum status --bootstrap $BOOT" >&2
echo "      curl -s $BOOT/v3/quorum/metadata" >&2
echo "Ctrl-C stops the quorum." >&2
wait
