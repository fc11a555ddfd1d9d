#!/usr/bin/env bash
# Set up the environment and start Longboat locally, in the foreground.
# Until the broker layer lands this runs the storage demo; the brokers issue makes it
# start the local cluster (3 controllers, 3 brokers) with `longboat dev up`.
set -euo pipefail
source "$(dirname "$0")/_env.sh"
exec longboat demo "$@"
