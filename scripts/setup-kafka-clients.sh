#!/usr/bin/env bash
# Install the system tools the Kafka protocol conformance tests (tests/integration/kafka) drive:
# kcat (librdkafka's command-line client, Debian package `kcat`). The Python clients
# (confluent-kafka, kafka-python) come from pyproject's dev extra. Idempotent: does nothing when
# kcat is there. Needs root for apt-get; without root it says what is missing and fails.
set -euo pipefail

missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
source "$(dirname "$0")/_apt.sh"
apt_install setup-kafka-clients "the Kafka protocol tests" "${missing[@]}"
