#!/usr/bin/env bash
# The fault-injection suite with the project environment and its system tools.
#   ./scripts/jepsen.sh                 the long sweep: every nemesis, 30 minutes each, many
#                                       seeds, against a real Longboat cluster; prints the table
#   ./scripts/jepsen.sh sweep --nemesis kill,pause --minutes 10
#   ./scripts/jepsen.sh run --nemesis kill,partition --time-limit 60 --seed 7
#   ./scripts/jepsen.sh run --cluster toy --nemesis lose-unsynced --toy-mode ack-before-sync
#   ./scripts/jepsen.sh check var/jepsen/<run>      ./scripts/jepsen.sh summary var/jepsen/<sweep>
# See docs/fault-injection.md.
set -euo pipefail
source "$(dirname "$0")/_env.sh"
"$ROOT/scripts/setup-jepsen.sh"
if [ $# -eq 0 ]; then
    set -- sweep --nemesis kill,pause,partition,lose-unsynced,clock,membership,kill+partition \
        --minutes 30 --time-limit 120
fi
exec python -m jepsen_tests "$@"
