"""Streaming word count: lines from one topic, running counts per word into another.

    python spark/examples/word_count.py --input lines --output word-counts \\
        --checkpoint /tmp/wc-ckpt [--available-now] [--demo]

Each micro-batch writes every word's count so far (output mode ``complete``; Spark gives
Python sinks no ``update`` mode) as records with key = the word and value = the count; the
latest record per key is the current count (a compacted topic keeps just that).
``--available-now`` processes what is in the input and stops; without it the query runs
until interrupted. ``--demo`` creates both topics and produces a few lines first. Rerun with
the same ``--checkpoint`` and the counts continue where they stopped.
"""

from __future__ import annotations

import argparse
import sys

from spark.examples._common import ensure_topic, session

DEMO = [
    "the quick brown fox",
    "jumps over the lazy dog",
    "the dog barks",
    "a fox is quick",
    "the end",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="http://127.0.0.1:8082")
    ap.add_argument("--input", default="lines")
    ap.add_argument("--output", default="word-counts")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--available-now", action="store_true")
    ap.add_argument("--demo", action="store_true")
    args = ap.parse_args(argv)
    if args.demo:
        from api.client import Producer

        ensure_topic(args.bootstrap, args.input, 2)
        ensure_topic(args.bootstrap, args.output, 2)
        with Producer(args.bootstrap) as p:
            for line in DEMO:
                p.send(args.input, line.encode())
            p.flush()
    spark = session("longboat-word-count")
    lines = (
        spark.readStream.format("longboat")
        .option("bootstrap", args.bootstrap)
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
        .load()
    )
    counts = (
        lines.selectExpr("explode(split(lower(CAST(value AS STRING)), '\\\\W+')) AS word")
        .where("word != ''")
        .groupBy("word")
        .count()
    )
    writer = (
        counts.selectExpr(
            "CAST(word AS BINARY) AS key", "CAST(CAST(count AS STRING) AS BINARY) AS value"
        )
        .writeStream.format("longboat")
        .option("bootstrap", args.bootstrap)
        .option("topic", args.output)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("complete")
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    progress = query.recentProgress
    print(
        f"word count: {sum(p['numInputRows'] for p in progress)} lines in "
        f"{len(progress)} micro-batches -> topic {args.output}"
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
