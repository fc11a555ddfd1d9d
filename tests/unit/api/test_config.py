from __future__ import annotations

from pathlib import Path

import pytest

from api.node.config import ConfigError, load_config, parse_quorum


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "node.toml"
    p.write_text(text)
    return p


def test_toml_with_cli_overrides(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        'node_id = 1\nroles = "broker,controller"\nlisten = "127.0.0.1:9301"\n'
        'controller_quorum = "1@127.0.0.1:9301,2@127.0.0.1:9302"\ndata_dir = "/tmp/x"\n',
    )
    c = load_config(p, {"rack": "r1", "listen": None})
    assert c.roles == ("broker", "controller")
    assert (c.host, c.port, c.rack) == ("127.0.0.1", 9301, "r1")
    assert [v.node_id for v in c.voters] == [1, 2]


def test_controller_must_be_a_voter(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        'node_id = 3\nroles = ["controller"]\ncontroller_quorum = "1@127.0.0.1:9301"\n'
        'data_dir = "d"\n',
    )
    with pytest.raises(ConfigError, match="not in controller_quorum"):
        load_config(p)


@pytest.mark.parametrize("spec", ["1@127.0.0.1", "x@h:1", "1@h:1,1@h:2", "1-h:2"])
def test_bad_quorum_specs_are_refused(spec: str) -> None:
    with pytest.raises(ConfigError):
        parse_quorum(spec)


def test_unknown_keys_and_bad_toml_are_clear_errors(tmp_path: Path) -> None:
    p = _write(tmp_path, 'node_id = 1\ndata_dir = "d"\ncontroller_quorum = "1@h:1"\nbogus = 2\n')
    with pytest.raises(ConfigError, match="bogus"):
        load_config(p)
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(_write(tmp_path, "node_id = = 1"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_page_cache_keep_bytes_builds_a_trimmer_or_none(tmp_path: Path) -> None:
    from api.node.broker_app import build_broker

    base = {
        "node_id": 1,
        "roles": "broker",
        "controller_quorum": "9@127.0.0.1:9309",
        "data_dir": str(tmp_path),
    }
    _, srv = build_broker(load_config(None, base), autostart=False)
    assert srv.replicas.page_cache is not None
    assert srv.replicas.page_cache.keep_bytes == 64 << 20  # the default
    _, srv = build_broker(
        load_config(None, {**base, "log_page_cache_keep_bytes": -1}), autostart=False
    )
    assert srv.replicas.page_cache is None  # -1: the kernel's page cache, as Kafka
    with pytest.raises(ConfigError, match="log_page_cache_keep_bytes"):
        load_config(None, {**base, "log_page_cache_keep_bytes": -2})


_BASE = {
    "node_id": 1,
    "roles": ["controller"],
    "listen": "127.0.0.1:9301",
    "controller_quorum": "1@127.0.0.1:9301",
    "data_dir": "d",
}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        # TOML booleans are never numbers (lax parsing read ``node_id = true`` as node 1).
        ({"node_id": True}, "node_id must be a number, got true"),
        ({"log_flush_interval_messages": False}, "log_flush_interval_messages must be a number"),
        # Node ids are Kafka's int32; a Raft voter's id is at least 1 (0 is "nobody").
        ({"node_id": 2**31}, "node_id: Input should be less than or equal to 2147483647"),
        ({"node_id": -1}, "node_id: Input should be greater than or equal to 0"),
        ({"node_id": 0, "controller_quorum": "0@127.0.0.1:9301"}, "a voter's id must be in [1,"),
        ({"controller_quorum": "1@127.0.0.1:9301,2147483648@h:1"}, "a voter's id must be in [1,"),
        ({"controller_quorum": "1@127.0.0.1:70000"}, "the port must be in [1, 65535]"),
        ({"controller_quorum": "1@127.0.0.1:0"}, "the port must be in [1, 65535]"),
        ({"listen": "127.0.0.1:0"}, "listen must be HOST:PORT"),
        ({"node_id": 1.5}, "node_id: Input should be a valid integer"),
        ({"node_id": {"a": 1}}, "node_id: Input should be a valid integer"),
        ({"node_id": "one"}, "node_id: Input should be a valid integer"),
        ({"roles": ["broker", "zookeeper"]}, "roles.1: Input should be 'broker' or 'controller'"),
        ({"roles": 5}, "roles: Input should be a valid tuple"),
        ({"rack": 5}, "rack: Input should be a valid string"),
        ({"broker_session_timeout_ms": -5}, "broker_session_timeout_ms: Input should be greater"),
        (
            {"group_min_session_timeout_ms": 10_000, "group_max_session_timeout_ms": 5_000},
            "group_min_session_timeout_ms (10000) is above group_max_session_timeout_ms (5000)",
        ),
    ],
)
def test_wrong_types_and_ranges_are_config_errors_naming_the_key(
    change: dict[str, object], says: str
) -> None:
    with pytest.raises(ConfigError) as ei:
        load_config(None, {**_BASE, **change})
    assert says in str(ei.value)


def test_command_line_overrides_may_be_strings_of_numbers() -> None:
    # ``--override broker_session_timeout_ms=3000`` hands over the string.
    c = load_config(
        None, {**_BASE, "broker_session_timeout_ms": "3000", "acks_require_fsync": "true"}
    )
    assert (c.broker_session_timeout_ms, c.acks_require_fsync) == (3000, True)


def test_an_unreadable_or_undecodable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(tmp_path)  # a directory
    p = tmp_path / "bad.toml"
    p.write_bytes(b"node_id = 1\n\xff\xfe = 2\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(p)


def test_kafka_listen_is_off_by_default_and_registers_a_kafka_endpoint() -> None:
    from api.node.broker_app import broker_endpoints

    base = {
        "node_id": 101,
        "controller_quorum": "1@127.0.0.1:9301",
        "data_dir": "/tmp/x",
        "listen": "127.0.0.1:8082",
    }
    off = load_config(None, base)
    assert off.kafka_address is None
    assert [e.name for e in broker_endpoints(off)] == ["http"]
    on = load_config(None, {**base, "kafka_listen": "127.0.0.1:9092"})
    assert on.kafka_address == ("127.0.0.1", 9092)
    assert [tuple(e) for e in broker_endpoints(on)] == [
        ("http", "127.0.0.1", 8082),
        ("kafka", "127.0.0.1", 9092),
    ]
    with pytest.raises(ConfigError, match="kafka_listen"):
        load_config(None, {**base, "kafka_listen": "nowhere"})


_BROKER = {
    "node_id": 101,
    "controller_quorum": "1@127.0.0.1:9301",
    "data_dir": "d",
    "listen": "127.0.0.1:8082",
}


def test_schema_registry_listen_adds_a_registry_listener_with_the_client_security() -> None:
    from api.node.broker_app import broker_endpoints
    from api.node.config import ListenerKind, SecurityProtocol

    assert [s.name for s in load_config(None, _BROKER).listener_specs()] == ["PLAINTEXT"]
    c = load_config(None, {**_BROKER, "schema_registry_listen": "127.0.0.1:8081"})
    reg = c.listener_specs()[-1]
    assert (reg.name, reg.host, reg.port, reg.protocol) == (
        "SCHEMA_REGISTRY",
        "127.0.0.1",
        8081,
        SecurityProtocol.PLAINTEXT,
    )
    assert reg.kinds == {ListenerKind.SCHEMA_REGISTRY}
    # Named listeners: it takes the client listener's protocol and settings; not advertised.
    named = load_config(
        None,
        {
            **_BROKER,
            "listeners": "CLIENT://127.0.0.1:8082,BROKER://127.0.0.1:8083",
            "listener_security_protocol_map": "CLIENT:SASL_PLAINTEXT,BROKER:PLAINTEXT",
            "inter_broker_listener_name": "BROKER",
            "listener_settings": {"CLIENT": {"http_auth_mechanisms": ["basic"]}},
            "schema_registry_listen": "127.0.0.1:8081",
        },
    )
    reg = named.listener_specs()[-1]
    client = named.listener_specs()[0]
    assert (reg.protocol, reg.settings) == (SecurityProtocol.SASL_PLAINTEXT, client.settings)
    assert "SCHEMA_REGISTRY" not in [e.name for e in broker_endpoints(named)]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            {"schema_registry_listen": "8081"},
            "schema_registry_listen must be HOST:PORT, got '8081'",
        ),
        ({"schema_registry_listen": "h:0"}, "schema_registry_listen must be HOST:PORT"),
        ({"schema_registry_listen": "127.0.0.1:8082"}, "give the registry a port of its own"),
        (
            {
                "roles": ["controller"],
                "node_id": 1,
                "listen": "127.0.0.1:9301",
                "schema_registry_listen": "127.0.0.1:8081",
            },
            "schema_registry_listen is for brokers",
        ),
        (
            {
                "listeners": "SCHEMA_REGISTRY://127.0.0.1:8083",
                "listener_security_protocol_map": "SCHEMA_REGISTRY:PLAINTEXT",
                "schema_registry_listen": "127.0.0.1:8081",
            },
            "is the name schema_registry_listen takes",
        ),
    ],
)
def test_bad_schema_registry_listen_is_refused_naming_the_key(
    change: dict[str, object], says: str
) -> None:
    with pytest.raises(ConfigError) as ei:
        load_config(None, {**_BROKER, **change})
    assert says in str(ei.value)
