#!/usr/bin/env bash
# The whole check: lint, types, import-layer contracts, then every test.
# Usage: ./scripts/test.sh [--extended] [pytest args...]
#   --extended: instead of the fast suite, the tests marked `extended` (Apache Kafka's Java
#   tools, Spark with Avro, the heavy benchmark smoke runs, 1,000 partitions in a browser):
#   minutes of JVM and cluster time the fast suite leaves out to stay within its budget.
set -euo pipefail
tier=(-m "not extended")
if [[ "${1:-}" == "--extended" ]]; then
    shift
    tier=(-m extended)
fi
# The Spark data source tests need pyspark + pyarrow; the benchmarks' peer clients are small.
export LONGBOAT_EXTRAS="${LONGBOAT_EXTRAS:-dev,spark,bench}"
source "$(dirname "$0")/_env.sh"

echo "==> ruff" >&2
ruff check .
echo "==> ruff format --check (one formatter for the whole tree)" >&2
ruff format --check .
echo "==> mypy" >&2
mypy
echo "==> import-linter (layers and pure cores)" >&2
lint-imports
echo "==> system tools for the fault-injection tests (nftables, iptables, faketime)" >&2
./scripts/setup-jepsen.sh
echo "==> system tools for the Kafka protocol tests (kcat)" >&2
./scripts/setup-kafka-clients.sh
echo "==> KafkaJS (npm) for the KafkaJS test" >&2
./scripts/setup-kafkajs.sh
# Both tiers: the fast suite's differential checks start Apache Kafka 4.4 from these jars.
echo "==> Apache Kafka 4.4's broker, Java client and tools (Maven Central)" >&2
./scripts/setup-kafka-java.sh >/dev/null
if [[ "${tier[1]}" == "extended" ]]; then
    echo "==> Spark's Kafka connector (Maven Central)" >&2
    PYTHON=python ./scripts/setup-spark-kafka.sh >/dev/null
fi
echo "==> the browser for the console's browser tests (chromium)" >&2
./scripts/setup-browser.sh
echo "==> Prometheus for the monitoring tests (promtool, a real scrape of deploy/'s queries)" >&2
./scripts/setup-monitoring.sh
echo "==> pytest" >&2
# CI has 2 cores; the fast suite is sized to finish within 25 minutes there.
python -m pytest -q --durations=30 "${tier[@]}" "$@"
