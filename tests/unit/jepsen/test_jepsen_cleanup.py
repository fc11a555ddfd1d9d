"""The cleanup registry undoes newest first, skips what was unregistered, survives failures."""

from __future__ import annotations

import pytest

from jepsen_tests import cleanup


def test_run_all_undoes_newest_first_and_skips_unregistered(
    capsys: pytest.CaptureFixture[str],
) -> None:
    done: list[str] = []

    def boom() -> None:
        raise RuntimeError("cannot")

    cleanup.register("a", lambda: done.append("a"))
    gone = cleanup.register("b", lambda: done.append("b"))
    cleanup.register("broken", boom)
    cleanup.register("c", lambda: done.append("c"))
    cleanup.unregister(gone)
    assert cleanup.pending()[-3:] == ["a", "broken", "c"]
    cleanup.run_all()
    assert done == ["c", "a"]
    assert "undoing broken failed" in capsys.readouterr().err
    assert cleanup.pending() == []
