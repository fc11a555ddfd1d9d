"""The Kafka listeners of the node config (``kafka_listen``, ``kafka_listeners``; issue 18):
their protocols and settings, and the configs that are refused with a clear message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from api.node.config import NodeConfig, SecurityProtocol


def config(tmp_path: Path, **kw: Any) -> NodeConfig:
    return NodeConfig(node_id=101, data_dir=tmp_path, controller_quorum="1@127.0.0.1:9301", **kw)


def test_kafka_listen_alone_is_plaintext_and_named_kafka(tmp_path: Path) -> None:
    (spec,) = config(tmp_path, kafka_listen="127.0.0.1:9092").kafka_listener_specs()
    assert (spec.name, spec.port, spec.protocol) == ("KAFKA", 9092, SecurityProtocol.PLAINTEXT)
    assert config(tmp_path).kafka_listener_specs() == []


def test_named_kafka_listeners_take_the_map_and_their_settings(tmp_path: Path) -> None:
    c = config(
        tmp_path,
        kafka_listen="127.0.0.1:9092",
        kafka_listeners="SECURE://127.0.0.1:9093,INSIDE://127.0.0.1:9094",
        listener_security_protocol_map="KAFKA:SASL_PLAINTEXT,SECURE:SASL_SSL,INSIDE:SSL",
        listener_settings={
            "SECURE": {
                "ssl_certfile": tmp_path / "c.pem",
                "ssl_keyfile": tmp_path / "k.pem",
                "sasl_enabled_mechanisms": ["SCRAM-SHA-512"],
            },
            "INSIDE": {"ssl_certfile": tmp_path / "c.pem", "ssl_keyfile": tmp_path / "k.pem"},
        },
    )
    specs = {s.name: s for s in c.kafka_listener_specs()}
    assert [s.protocol for s in specs.values()] == ["SASL_PLAINTEXT", "SASL_SSL", "SSL"]
    assert specs["SECURE"].settings.sasl_enabled_mechanisms == ("SCRAM-SHA-512",)
    assert specs["KAFKA"].settings.sasl_enabled_mechanisms == (
        "PLAIN",
        "SCRAM-SHA-256",
        "SCRAM-SHA-512",
    )
    assert c.kafka_address == ("127.0.0.1", 9092)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"kafka_listeners": "SECURE://127.0.0.1:9093"}, "has no security protocol"),
        (
            {"kafka_listeners": "S://127.0.0.1:9093", "listener_security_protocol_map": "S:SSL"},
            "needs ssl_certfile and ssl_keyfile",
        ),
        (
            {"kafka_listen": "127.0.0.1:9092", "kafka_listeners": "KAFKA://127.0.0.1:9093"},
            "names repeat",
        ),
        ({"kafka_listen": "127.0.0.1:8082"}, "address of an HTTP listener"),
        (
            {
                "kafka_listeners": "S://127.0.0.1:9093",
                "listener_security_protocol_map": "S:SASL_PLAINTEXT",
                "listener_settings": {"S": {"sasl_enabled_mechanisms": ["GSSAPI"]}},
            },
            "sasl_enabled_mechanisms",
        ),
    ],
)
def test_bad_kafka_listener_configs_are_refused(
    tmp_path: Path, kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        config(tmp_path, **kw)


def test_bearer_tokens_without_keys_are_refused_on_either_kind_of_listener(
    tmp_path: Path,
) -> None:
    # One loader (api.node.listeners.principal_sources) serves the HTTP and Kafka listeners:
    # each names its own listener and why it needed keys.
    from api.http.auth import AuthState, StaticCredentials
    from api.node.config import ConfigError
    from api.node.kafka_security import listener_security
    from api.node.listeners import listener_auth

    c = config(
        tmp_path,
        kafka_listeners="OB://127.0.0.1:9093",
        listener_security_protocol_map="OB:SASL_PLAINTEXT",
        listener_settings={"OB": {"sasl_enabled_mechanisms": ["OAUTHBEARER"]}},
    )
    (spec,) = [s for s in c.kafka_listener_specs() if s.name == "OB"]
    with pytest.raises(ConfigError, match="Kafka listener OB enables OAUTHBEARER: it needs"):
        listener_security(spec, AuthState(StaticCredentials()), None)
    h = config(
        tmp_path,
        listeners="CLIENT://127.0.0.1:8443",
        listener_security_protocol_map="CLIENT:SASL_PLAINTEXT",
        listener_settings={"CLIENT": {"http_auth_mechanisms": ["bearer"]}},
    )
    (hspec,) = h.listener_specs()
    with pytest.raises(ConfigError, match="listener CLIENT accepts bearer tokens: it needs"):
        listener_auth(hspec)
