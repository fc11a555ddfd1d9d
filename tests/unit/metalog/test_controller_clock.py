"""The controller service's clock is monotonic (issue 17): a wall-clock step fences nobody."""

from __future__ import annotations

import time
from unittest import mock

from metalog import service


def test_a_wall_clock_step_does_not_move_the_controllers_clock() -> None:
    before = service.monotonic_ms()
    with mock.patch.object(time, "time", lambda: 4_000_000_000.0):  # a jump of decades
        during = service.monotonic_ms()
    assert 0 <= during - before < 1_000


def test_the_service_uses_the_monotonic_clock_by_default() -> None:
    default = service.ControllerService.__init__.__kwdefaults__["clock_ms"]
    assert default is service.monotonic_ms
