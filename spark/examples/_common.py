"""What the examples share: a local SparkSession with the source registered, and topics."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any


def session(app: str) -> Any:
    # Workers must run this interpreter (it has pyarrow and the longboat package); the JVM
    # reads these when it starts, which for `python example.py` is at getOrCreate().
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from spark import register

    s = (
        SparkSession.builder.appName(app)
        .master(os.environ.get("SPARK_MASTER", "local[2]"))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("WARN")
    register(s)
    return s


def ensure_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Create ``name`` through the HTTP API unless it exists."""
    url = bootstrap.split(",")[0].rstrip("/")
    with urllib.request.urlopen(f"{url}/v3/clusters", timeout=10) as r:
        cid = json.loads(r.read())["data"][0]["cluster_id"]
    body = json.dumps({"topic_name": name, "partitions_count": partitions}).encode()
    req = urllib.request.Request(
        f"{url}/v3/clusters/{cid}/topics",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        urllib.request.urlopen(req, timeout=30).close()
    except urllib.error.HTTPError as e:
        if b"already exists" not in e.read():
            raise
