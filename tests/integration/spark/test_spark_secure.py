"""The longboat data source against a secure cluster of real processes (issue 18): TLS on
every listener, SCRAM users, ACLs, in a real local[2] SparkSession.

One cluster (1 controller, 2 brokers, ``running_cluster(secure=True)``) for the module. The
fast tier runs the data source's driver and task code as Spark would, without a session
(planning, ``read_range``, the writer's ``write``); the extended tier runs the same in a
real local[2] SparkSession. ``alice`` may read and write the topic; ``bob`` may only write it (which
implies DESCRIBE, so he sees it exist and is refused its records, not told it is missing).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from longboat_spark_harness import spark_session

from api.client import Admin, ClientSecurity, Consumer, TopicPartition
from api.node.localcluster import Brokers, Quorum, running_cluster
from metalog.security import AclBinding, Operation, PatternType, Permission, ResourceType
from spark.options import parse_source_options
from spark.security import LongboatAuthError
from spark.source import LongboatBatchReader, LongboatDataSource

pytestmark = pytest.mark.slow

TOPIC = "vault"
PASSWORD = "correct horse 7"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Quorum, Brokers]]:
    root = tmp_path_factory.mktemp("spark-secure")
    with running_cluster(root, controllers=1, brokers=2, secure=True, ready_timeout_s=90) as qb:
        q, b = qb
        assert q.secure is not None
        admin = Admin([b.url(i) for i in b.ids], ssl_context=q.secure.client_ssl())
        admin.upsert_user("alice", PASSWORD, mechanism="SCRAM-SHA-512")
        admin.upsert_user("bob", PASSWORD, mechanism="SCRAM-SHA-512")

        def acl(user: str, op: Operation) -> AclBinding:
            return AclBinding(
                f"User:{user}",
                "*",
                ResourceType.TOPIC,
                TOPIC,
                PatternType.LITERAL,
                op,
                Permission.ALLOW,
            )

        admin.create_acls(
            [
                acl("alice", Operation.READ),
                acl("alice", Operation.WRITE),
                acl("bob", Operation.WRITE),
            ]
        )
        _create_topic(b, q)
        _wait_until_every_broker_knows_alice(b, q)
        yield qb


def _create_topic(b: Brokers, q: Quorum) -> None:
    import json
    import urllib.request

    assert q.secure is not None
    ctx = q.secure.client_ssl()
    with urllib.request.urlopen(b.url(b.ids[0]) + "/v3/clusters", context=ctx) as r:
        cid = json.loads(r.read())["data"][0]["cluster_id"]
    body = {"topic_name": TOPIC, "partitions_count": 2, "replication_factor": 2}
    req = urllib.request.Request(
        f"{b.url(b.ids[0])}/v3/clusters/{cid}/topics",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, context=ctx) as r:
        assert r.status in (200, 201)


def _wait_until_every_broker_knows_alice(b: Brokers, q: Quorum) -> None:
    # Users, ACLs and the topic reach each broker through the metadata log at its own pace.
    assert q.secure is not None
    sec = ClientSecurity(ssl_cafile=str(q.secure.ca.cert), username="alice", password=PASSWORD)
    for broker in b.ids:
        deadline = time.monotonic() + 30
        while True:
            try:
                with Consumer(b.url(broker), security=sec) as c:
                    c.end_offsets([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    s = spark_session(tmp_path_factory.mktemp("spark"))
    yield s
    s.stop()


def _hosts(b: Brokers) -> str:
    # Bare host:port, as Spark's Kafka jobs write kafka.bootstrap.servers: the protocol
    # option makes them https.
    return ",".join(b.url(i).removeprefix("https://") for i in b.ids)


def _opts(q: Quorum, b: Brokers, user: str = "alice", password: str = PASSWORD) -> dict[str, str]:
    assert q.secure is not None
    return {
        "kafka.bootstrap.servers": _hosts(b),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.truststore.location": str(q.secure.ca.cert),
        "kafka.ssl.truststore.type": "PEM",
        "longboat.auth.username": user,
        "longboat.auth.password": password,
    }


def _read(spark: Any, opts: dict[str, str], **more: str) -> Any:
    return spark.read.format("longboat").options(**opts, subscribe=TOPIC, **more).load()


def _values(df: Any) -> list[str]:
    return sorted(r.v for r in df.selectExpr("CAST(value AS STRING) AS v").collect())


def _plan_and_read(opts: dict[str, str]) -> list[str]:
    """What Spark's driver and tasks run for a batch read, in this process."""
    reader = LongboatBatchReader(
        parse_source_options({**opts, "subscribe": TOPIC}, streaming=False)
    )
    out: list[str] = []
    for part in reader.partitions():
        for batch in reader.read(part):
            out += [bytes(v).decode() for v in batch.column("value").to_pylist()]
    return sorted(out)


def _write_rows(opts: dict[str, str], rows: list[str]) -> None:
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("value", StringType())])
    writer = LongboatDataSource({**opts, "topic": TOPIC}).writer(schema, False)
    writer.write(iter([pa.RecordBatch.from_pydict({"value": rows})]))


def test_the_sources_driver_and_task_code_over_tls_with_credentials(
    cluster: tuple[Quorum, Brokers],
) -> None:
    q, b = cluster
    rows = [f"task-{i}" for i in range(20)]
    _write_rows(_opts(q, b), rows)
    got = _plan_and_read(_opts(q, b))
    assert set(rows) <= set(got)
    assert _plan_and_read({**_opts(q, b), "fetchFormat": "batches"}) == got
    with pytest.raises(LongboatAuthError, match="SASL_AUTHENTICATION_FAILED") as e:
        _plan_and_read(_opts(q, b, password="wrong-pass-99"))
    assert "wrong-pass-99" not in str(e.value)
    with pytest.raises(LongboatAuthError, match="SASL_AUTHENTICATION_FAILED"):
        _write_rows(_opts(q, b, password="wrong-pass-99"), ["x"])
    # bob: planning is allowed (DESCRIBE), the task's fetch is refused, in either format.
    for fmt in ("arrow", "batches"):
        with pytest.raises(LongboatAuthError, match="TOPIC_AUTHORIZATION_FAILED"):
            _plan_and_read({**_opts(q, b, user="bob"), "fetchFormat": fmt})


@pytest.mark.extended
def test_write_then_read_over_tls_with_scram_credentials(
    spark: Any, cluster: tuple[Quorum, Brokers]
) -> None:
    q, b = cluster
    rows = [(f"k{i}", f"secret-{i}") for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value string")
    df.write.format("longboat").options(**_opts(q, b), topic=TOPIC).mode("append").save()
    assert set(_values(_read(spark, _opts(q, b)))) >= {v for _, v in rows}


@pytest.mark.extended
def test_a_wrong_password_or_a_user_without_read_is_refused_by_name(
    spark: Any, cluster: tuple[Quorum, Brokers]
) -> None:
    q, b = cluster
    # The driver plans the read: its metadata call is refused 401.
    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED") as e:
        _read(spark, _opts(q, b, password="wrong-pass-99")).collect()
    assert "wrong-pass-99" not in str(e.value)
    # bob may describe the topic (WRITE implies DESCRIBE), so planning succeeds and the
    # executors' fetches are refused 403.
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        _read(spark, _opts(q, b, user="bob")).collect()


@pytest.mark.extended
def test_every_way_to_authenticate_and_fetch(spark: Any, cluster: tuple[Quorum, Brokers]) -> None:
    q, b = cluster
    assert q.secure is not None
    want = _values(_read(spark, _opts(q, b)))
    assert want
    # Raw batches (binary fetch route) as well as the brokers' Arrow (v3 read route).
    assert _values(_read(spark, _opts(q, b), fetchFormat="batches")) == want
    # A bearer token (principal from its sub claim) and Kafka's SCRAM JAAS config work alike.
    token = {**_opts(q, b), "longboat.auth.token": q.secure.token("alice")}
    del token["longboat.auth.username"], token["longboat.auth.password"]
    assert _values(_read(spark, token)) == want
    jaas = {
        **_opts(q, b),
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        f'required username="alice" password="{PASSWORD}";',
    }
    del jaas["longboat.auth.username"], jaas["longboat.auth.password"]
    assert _values(_read(spark, jaas)) == want
    # mTLS: the admin certificate (a super user) instead of a password.
    mtls = {
        "kafka.bootstrap.servers": _hosts(b),
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.location": str(q.secure.ca.cert),
        "kafka.ssl.certificate.location": str(q.secure.admin.cert),
        "kafka.ssl.key.location": str(q.secure.admin.key),
    }
    assert _values(_read(spark, mtls)) == want


@pytest.mark.extended
def test_refusals_on_every_path(spark: Any, cluster: tuple[Quorum, Brokers]) -> None:
    q, b = cluster
    bad = _opts(q, b, password="wrong-pass-99")
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED") as e:
        df.write.format("longboat").options(**bad, topic=TOPIC).mode("append").save()
    assert "wrong-pass-99" not in str(e.value)
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        _read(spark, _opts(q, b, user="bob"), fetchFormat="batches").collect()
    # bob may write: his rows arrive, and alice reads them.
    spark.createDataFrame([("from-bob",)], "value string").write.format("longboat").options(
        **_opts(q, b, user="bob"), topic=TOPIC
    ).mode("append").save()
    assert "from-bob" in _values(_read(spark, _opts(q, b)))
    # No truststore: the brokers' certificates (of the cluster's own CA) are not trusted.
    # (~30 s: the client retries a failed handshake like a network error until its timeout.)
    untrusted = {k: v for k, v in _opts(q, b).items() if k != "kafka.ssl.truststore.location"}
    with pytest.raises(Exception, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        _read(spark, untrusted).collect()


@pytest.mark.extended
def test_secrets_stay_out_of_the_plan(
    spark: Any, cluster: tuple[Quorum, Brokers], capsys: pytest.CaptureFixture[str]
) -> None:
    # Spark prints a Python data source's scan without its options; this pins that (and
    # our reprs) so a change that starts showing them is noticed.
    q, b = cluster
    assert q.secure is not None
    token = q.secure.token("alice")
    _read(spark, _opts(q, b)).explain(mode="extended")
    plain = {k: v for k, v in _opts(q, b).items() if not k.startswith("longboat.auth")}
    _read(spark, {**plain, "longboat.auth.token": token}).explain(mode="extended")
    out = capsys.readouterr().out
    assert "BatchScan longboat" in out, out  # the plan was printed at all
    assert PASSWORD not in out and token not in out, out


@pytest.mark.extended
def test_avro_values_through_a_secure_registry(spark: Any, cluster: tuple[Quorum, Brokers]) -> None:
    """valueFormat=avro registers and reads the subject's schema with the job's TLS files and
    credentials (alice: WRITE and READ on the topic, so its subject's writes and reads)."""
    q, b = cluster
    rows = [(f"a{i}", (i, f"n{i}")) for i in range(10)]
    df = spark.createDataFrame(rows, "key string, value struct<id:bigint,name:string>")
    (
        df.write.format("longboat")
        .options(**_opts(q, b), topic=TOPIC, valueFormat="avro")
        .option("valueSchema.autoRegister", "true")
        .mode("append")
        .save()
    )
    # The topic also holds the other tests' plain strings: PERMISSIVE leaves them null.
    back = _read(spark, _opts(q, b), valueFormat="avro", mode="PERMISSIVE")
    got = {(r.value.id, r.value.name) for r in back.select("value").collect() if r.value}
    assert {(i, f"n{i}") for i in range(10)} <= got
