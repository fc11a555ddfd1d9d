#!/usr/bin/env bash
# Install what the monitoring tests (tests/integration/metrics) check the deploy/ files with:
# Debian's `prometheus` package, for `promtool check rules` and a real Prometheus that scrapes
# a test cluster and evaluates every Grafana dashboard query and alert rule. Idempotent: does
# nothing when both are there. Needs root for apt-get; without root it says what is missing
# and fails.
set -euo pipefail

missing=()
{ command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; } || missing+=(prometheus)
source "$(dirname "$0")/_apt.sh"
apt_install setup-monitoring "the monitoring tests" "${missing[@]}"
