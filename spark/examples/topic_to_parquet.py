"""Batch ingestion: every record of a topic (up to now) into a Parquet directory.

    python spark/examples/topic_to_parquet.py --topic clicks --out /tmp/clicks.parquet

``--demo N`` first creates the topic and produces N records, so the example runs against an
empty cluster. The Parquet files keep Spark's Kafka columns, values as strings.
"""

from __future__ import annotations

import argparse
import sys
import time

from spark.examples._common import ensure_topic, session


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="http://127.0.0.1:8082")
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--demo",
        type=int,
        default=0,
        metavar="N",
        help="create the topic and produce N records first",
    )
    args = ap.parse_args(argv)
    if args.demo:
        from api.client import Producer

        ensure_topic(args.bootstrap, args.topic, 3)
        with Producer(args.bootstrap) as p:
            for i in range(args.demo):
                p.send(args.topic, f"click {i}".encode(), key=f"user{i % 10}".encode())
            p.flush()
    spark = session("longboat-topic-to-parquet")
    t0 = time.monotonic()
    df = (
        spark.read.format("longboat")
        .option("bootstrap", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr(
            "CAST(key AS STRING) AS key",
            "CAST(value AS STRING) AS value",
            "topic",
            "partition",
            "offset",
            "timestamp",
        )
    )
    df.write.mode("overwrite").parquet(args.out)
    n = spark.read.parquet(args.out).count()
    print(f"wrote {n} records of {args.topic} to {args.out} in {time.monotonic() - t0:.1f} s")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
