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


@pytest.mark.parametrize(
    "spec", ["1@127.0.0.1", "x@h:1", "1@h:1,1@h:2", "1-h:2"]
)
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

    base = {"node_id": 1, "roles": "broker", "controller_quorum": "9@127.0.0.1:9309",
            "data_dir": str(tmp_path)}
    _, srv = build_broker(load_config(None, base), autostart=False)
    assert srv.replicas.page_cache is not None
    assert srv.replicas.page_cache.keep_bytes == 64 << 20  # the default
    _, srv = build_broker(load_config(None, {**base, "log_page_cache_keep_bytes": -1}),
                          autostart=False)
    assert srv.replicas.page_cache is None  # -1: the kernel's page cache, as Kafka
    with pytest.raises(ConfigError, match="log_page_cache_keep_bytes"):
        load_config(None, {**base, "log_page_cache_keep_bytes": -2})
