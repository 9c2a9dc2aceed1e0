"""The demo's per-stage clock (the time breakdown ``make demo`` prints)."""

from __future__ import annotations

import pytest

from vlattn.demo import StageClock


def test_stage_clock_records_each_stage_in_order() -> None:
    clock = StageClock()
    with clock.stage("synthetic data"):
        sum(range(100_000))
    with pytest.raises(KeyError), clock.stage("failing"):
        raise KeyError("a failed stage is not recorded")
    with clock.stage("XE training"):
        pass
    assert [name for name, _, _ in clock.stages] == ["synthetic data", "XE training"]
    assert all(wall >= 0 and cpu >= 0 for _, wall, cpu in clock.stages)
    assert clock.summary().startswith("synthetic data ") and "; XE training " in clock.summary()
