"""Runs every scripted scenario in testdata/ (see raft_scenario.py for the format) and
checks the harness itself: a wrong expectation fails with a diff, and LONGBOAT_REWRITE=1
rewrites the file in place, keeping its comments."""

from __future__ import annotations

from pathlib import Path

import pytest
from raft_scenario import REWRITE_ENV, ScriptError, check_script, parse, render, scripts

TESTDATA = Path(__file__).parent / "testdata"


@pytest.mark.parametrize("path", scripts(TESTDATA), ids=lambda p: p.stem)
def test_scenario(path: Path) -> None:
    check_script(path)


def test_there_are_scenarios_for_elections_log_repair_snapshots_and_membership() -> None:
    names = {p.stem for p in scripts(TESTDATA)}
    assert {
        "elections",
        "pre_vote",
        "check_quorum",
        "log_repair",
        "snapshot",
        "membership",
    } <= names


SCRIPT = """\
# Two nodes; 1 campaigns.
add-nodes 2 voters=(1,2)
----
{add}

campaign 1
----
{campaign}

# the end
"""


def _text(campaign: str) -> str:
    add = "\n".join(
        f"INFO {n} {line}"
        for n in (1, 2)
        for line in (
            "switched configuration [term=0 voters=(1 2) observers=() index=0]",
            "became follower [term=0 leader=0 why=start]",
        )
    )
    return SCRIPT.format(add=add, campaign=campaign)


def _write(tmp_path: Path, campaign: str) -> Path:
    p = tmp_path / "s.txt"
    p.write_text(_text(campaign))
    return p


CAMPAIGN = """\
INFO 1 became pre-candidate [term=0 last_index=0 last_term=0]
INFO 1 received vote [term=0 src=1 granted=True pre_vote=True granted_total=1 rejected_total=0]"""


def test_a_script_whose_output_matches_passes(tmp_path: Path) -> None:
    check_script(_write(tmp_path, CAMPAIGN))


def test_a_wrong_expectation_fails_with_a_diff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REWRITE_ENV, raising=False)
    p = _write(tmp_path, CAMPAIGN.replace("pre-candidate", "candidate"))
    with pytest.raises(AssertionError) as e:
        check_script(p)
    assert "-INFO 1 became candidate [term=0" in str(e.value)
    assert "+INFO 1 became pre-candidate [term=0" in str(e.value)


def test_rewrite_mode_writes_the_actual_output_and_keeps_the_comments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _write(tmp_path, "stale")
    monkeypatch.setenv(REWRITE_ENV, "1")
    check_script(p)
    assert p.read_text() == _text(CAMPAIGN)  # comments kept, "stale" replaced


def test_parse_and_render_round_trip_a_script() -> None:
    text = SCRIPT.format(add="ok", campaign="x\ny")
    blocks, tail = parse(text)
    assert [b.command for b in blocks] == ["add-nodes 2 voters=(1,2)", "campaign 1"]
    assert render(blocks, [b.expected for b in blocks], tail) == text


def test_an_unknown_command_is_a_script_error(tmp_path: Path) -> None:
    p = tmp_path / "bad.txt"
    p.write_text("frobnicate 1\n----\nok\n")
    with pytest.raises(ScriptError, match=r"bad\.txt:1: unknown command"):
        check_script(p)
