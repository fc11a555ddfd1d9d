#!/usr/bin/env bash
# Run the fault-injection suite's CLI with the project environment and its system tools.
#   ./scripts/jepsen.sh run --cluster toy --nemesis kill,partition --time-limit 30 --seed 7
#   ./scripts/jepsen.sh check var/jepsen/<run>
# See docs/fault-injection.md.
set -euo pipefail
source "$(dirname "$0")/_env.sh"
"$ROOT/scripts/setup-jepsen.sh"
exec python -m jepsen_tests "$@"
