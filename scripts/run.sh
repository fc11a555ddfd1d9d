#!/usr/bin/env bash
# Set up the environment and start a local Longboat cluster in the foreground:
# 3 controllers (127.0.0.1:9301-9303) and 3 brokers (127.0.0.1:8082-8084), data and logs
# under ./var/dev. Ctrl-C stops it. Arguments go to `longboat dev up` (see --help);
# `longboat demo` still runs the storage-only demo.
set -euo pipefail
source "$(dirname "$0")/_env.sh"
exec longboat dev up "$@"
