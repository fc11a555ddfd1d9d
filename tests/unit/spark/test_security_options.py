"""The data source's TLS and credential options (issue 18): Kafka's names, checked against
kafka.security.protocol, secrets kept out of reprs and error messages."""

from __future__ import annotations

import pickle

import pytest

from spark.options import LongboatOptionError, parse_sink_options, parse_source_options
from spark.security import auth_headers, client_security

READ = {"subscribe": "t"}


def src(**opts: str) -> object:
    return parse_source_options({**READ, **opts}, streaming=False)


def test_ssl_protocol_makes_bare_hosts_https_and_reads_pem_stores() -> None:
    o = parse_source_options(
        {
            **READ,
            "kafka.bootstrap.servers": "b1:8082,b2:8082",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.ssl.truststore.location": "/etc/ca.pem",
            "kafka.ssl.truststore.type": "pem",
            "kafka.ssl.keystore.location": "/etc/me.pem",
            "longboat.auth.username": "alice",
            "longboat.auth.password": "s3cret-pw",
        },
        streaming=False,
    )
    assert o.bootstrap == ("https://b1:8082", "https://b2:8082")
    sec = o.security
    assert (sec.tls, sec.cafile, sec.certfile, sec.keyfile) == (
        True,
        "/etc/ca.pem",
        "/etc/me.pem",
        "/etc/me.pem",
    )
    cs = client_security(sec)
    assert cs is not None and (cs.username, cs.password) == ("alice", "s3cret-pw")
    assert auth_headers(sec)["Authorization"].startswith("Basic ")
    # Reprs end up in logs and exceptions; pickles are what Spark ships to executors.
    assert "s3cret-pw" not in repr(o) and "s3cret-pw" not in repr(cs)
    assert pickle.loads(pickle.dumps(o)).security == sec


def test_librdkafka_file_names_and_a_token() -> None:
    o = src(
        bootstrap="https://b1:8082",
        **{
            "kafka.ssl.ca.location": "ca.pem",
            "kafka.ssl.certificate.location": "c.pem",
            "kafka.ssl.key.location": "k.pem",
            "longboat.auth.token": "tok-123",
        },
    )
    sec = o.security  # type: ignore[attr-defined]
    assert (sec.cafile, sec.certfile, sec.keyfile, sec.token) == (
        "ca.pem",
        "c.pem",
        "k.pem",
        "tok-123",
    )
    assert auth_headers(sec) == {"Authorization": "Bearer tok-123"}
    assert "tok-123" not in repr(o)


def test_jaas_config_of_a_scram_job_becomes_basic_credentials() -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="bob" password="an \\"oar\\"";'
    )
    o = parse_sink_options(
        {
            "bootstrap": "b:1",
            "topic": "t",
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": jaas,
        }
    )
    assert o.bootstrap == ("http://b:1",)
    assert (o.security.username, o.security.password) == ("bob", 'an "oar"')
    assert not o.security.tls


def test_plaintext_and_anonymous_by_default() -> None:
    o = src(bootstrap="b:1")
    assert client_security(o.security) is None  # type: ignore[attr-defined]
    assert auth_headers(o.security) == {}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({"kafka.security.protocol": "TLS"}, "must be one of PLAINTEXT, SSL"),
        (
            {"bootstrap": "http://b:1", "kafka.security.protocol": "SSL"},
            "does not match kafka.security.protocol=SSL",
        ),
        ({"kafka.security.protocol": "SASL_SSL"}, "needs credentials"),
        (
            {"kafka.security.protocol": "SSL", "longboat.auth.token": "x"},
            "use SASL_SSL",
        ),
        ({"kafka.ssl.truststore.location": "ca.pem"}, "bootstrap URLs are http://"),
        (
            {"bootstrap": "https://b:1", "kafka.ssl.truststore.type": "JKS"},
            "must be PEM",
        ),
        ({"bootstrap": "https://b:1", "kafka.ssl.key.location": "k.pem"}, "go together"),
        ({"longboat.auth.username": "u"}, "go together"),
        (
            {
                "longboat.auth.username": "u",
                "longboat.auth.password": "p",
                "longboat.auth.token": "t",
            },
            "not both",
        ),
        ({"kafka.ssl.key.password": "p"}, "encrypted private keys are not supported"),
        (
            {"kafka.sasl.mechanism": "OAUTHBEARER", "kafka.sasl.jaas.config": "x"},
            "longboat.auth.token",
        ),
        ({"kafka.sasl.jaas.config": 'u required username="a" password="hunter2";'}, "GSSAPI"),
    ],
)
def test_bad_security_options_are_refused_by_name(opts: dict[str, str], message: str) -> None:
    with pytest.raises(LongboatOptionError, match=message):
        src(**{"bootstrap": "b:1", **opts})


def test_a_jaas_config_without_a_password_is_refused_without_echoing_it() -> None:
    with pytest.raises(LongboatOptionError) as e:
        src(
            bootstrap="b:1",
            **{
                "kafka.sasl.mechanism": "PLAIN",
                "kafka.sasl.jaas.config": 'PlainLoginModule required username="a" pasword="hunter2";',
            },
        )
    assert "hunter2" not in str(e.value)
