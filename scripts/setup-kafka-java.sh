#!/usr/bin/env bash
# Fetch Apache Kafka's Java client, tools and broker (4.4, Maven Central) for the Java conformance
# tests (tests/integration/kafka/test_kafka_java.py) and the benchmark
# (scripts/bench/kafka_protocol.py): `mvn dependency:copy-dependencies` of tests/kafka_java/pom.xml
# into a cache directory, run as `java -cp '<dir>/*' <main class>`. Idempotent: a complete
# directory (marked by .complete) is left alone. Prints the directory on stdout.
#   LONGBOAT_KAFKA_JAVA_DIR  where the jars go (default ~/.cache/longboat/kafka-java-4.4.0)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${LONGBOAT_KAFKA_JAVA_DIR:-$HOME/.cache/longboat/kafka-java-4.4.0}"
if [[ -f "$dir/.complete" ]]; then
  echo "$dir"
  exit 0
fi
source "$root/scripts/_maven.sh"
maven_tools setup-kafka-java
tmp="$dir.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mvn -q -B -f "$root/tests/kafka_java/pom.xml" dependency:copy-dependencies \
  -DoutputDirectory="$tmp" -DincludeScope=runtime >&2
maven_publish "$tmp" "$dir"
