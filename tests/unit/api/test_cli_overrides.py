"""``--override KEY=VALUE`` on node start commands: validated as the TOML file is, and an
explicit flag wins over an override of the same key."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from api.cli.common import with_overrides
from api.cli.main import main


def test_overrides_fill_keys_explicit_flags_win() -> None:
    got = with_overrides(
        {"node_id": 3, "replica_lag_time_max_ms": None},
        ("replica_lag_time_max_ms=500", "node_id=9", "rack = r1"),
    )
    assert got == {"node_id": 3, "replica_lag_time_max_ms": "500", "rack": "r1"}
    with pytest.raises(click.UsageError, match="KEY=VALUE"):
        with_overrides({}, ("no-equals-sign",))


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["broker", "start", "--override", "replica_lag_time_max_ms=soon"],
            "replica_lag_time_max_ms: Input should be a valid integer",
        ),
        (["controller", "start", "--override", "nope=1"], "nope: Extra inputs are not permitted"),
        (["broker", "start", "--override", "broker_session_timeout_ms"], "expected KEY=VALUE"),
    ],
)
def test_bad_overrides_are_refused_before_anything_starts(
    args: list[str], message: str, tmp_path: object
) -> None:
    r = CliRunner().invoke(
        main,
        [
            *args,
            "--node-id",
            "1",
            "--controller-quorum",
            "1@127.0.0.1:9",
            "--data-dir",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 2, r.output
    assert message in r.output
