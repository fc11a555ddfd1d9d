#!/usr/bin/env bash
# Fetch Spark's own Kafka connector (spark-sql-kafka-0-10 and the jars it needs beyond PySpark's:
# spark-token-provider-kafka-0-10, kafka-clients, commons-pool2) from Maven Central for the test
# of Spark's format("kafka") against Longboat (tests/integration/kafka/test_spark_kafka.py):
# `mvn dependency:copy-dependencies` of tests/spark_kafka/pom.xml into a cache directory, which
# the test hands to Spark as `spark.jars`. The connector's version is the installed PySpark's
# when Maven Central serves it, else the newest release known to resolve there
# (SPARK_KAFKA_FALLBACK_VERSION; PySpark 4.3.0 was on PyPI before its connector reached
# Central). Idempotent: a complete directory (marked by .complete) is left alone. Prints the
# directory on stdout.
#   PYTHON                      the interpreter whose PySpark to match (default python3)
#   LONGBOAT_SPARK_KAFKA_DIR    where the jars go (default ~/.cache/longboat/spark-kafka-<pyspark>)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
fallback="${SPARK_KAFKA_FALLBACK_VERSION:-4.2.0}"
pyspark="$("$python" -c 'import pyspark; print(pyspark.__version__)')"
dir="${LONGBOAT_SPARK_KAFKA_DIR:-$HOME/.cache/longboat/spark-kafka-$pyspark}"
if [[ -f "$dir/.complete" ]]; then
  echo "$dir"
  exit 0
fi
source "$root/scripts/_maven.sh"
maven_tools setup-spark-kafka
tmp="$dir.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
copy() {
  mvn -q -B -f "$root/tests/spark_kafka/pom.xml" dependency:copy-dependencies \
    -Dspark.version="$1" -DoutputDirectory="$tmp" -DincludeScope=runtime >"$tmp.log" 2>&1
}
mkdir -p "$tmp"
if copy "$pyspark"; then
  version="$pyspark"
elif [[ "$fallback" != "$pyspark" ]] && copy "$fallback"; then
  version="$fallback"
  echo "setup-spark-kafka: Maven Central has no spark-sql-kafka-0-10 $pyspark;" \
    "using $fallback with PySpark $pyspark" >&2
else
  cat "$tmp.log" >&2
  rm -f "$tmp.log"
  echo "setup-spark-kafka: could not fetch spark-sql-kafka-0-10 $pyspark or $fallback" >&2
  exit 1
fi
rm -f "$tmp.log"
echo "$version" >"$tmp/connector-version"
maven_publish "$tmp" "$dir"
