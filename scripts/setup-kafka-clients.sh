#!/usr/bin/env bash
# Install the system tools the Kafka protocol conformance tests (tests/integration/kafka) drive:
# kcat (librdkafka's command-line client, Debian package `kcat`). The Python clients
# (confluent-kafka, kafka-python) come from pyproject's dev extra. Idempotent: does nothing when
# kcat is there. Needs root for apt-get; without root it says what is missing and fails.
set -euo pipefail

if command -v kcat >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "setup-kafka-clients: kcat is missing; install it as root:" >&2
    echo "  apt-get update && apt-get install -y kcat" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-kafka-clients: kcat is missing and there is no apt-get to install it" >&2
    exit 1
fi

echo "==> installing kcat for the Kafka protocol tests" >&2
export DEBIAN_FRONTEND=noninteractive
LOG="${TMPDIR:-/tmp}/setup-kafka-clients.log"
if ! { apt-get update && apt-get install -y --no-install-recommends kcat; } >"$LOG" 2>&1; then
    tail -30 "$LOG" >&2
    echo "setup-kafka-clients: apt-get failed; full log in $LOG" >&2
    exit 1
fi
