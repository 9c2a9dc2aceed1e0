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


def test_demo_report_explains_three_test_images_and_keeps_an_existing_report(tiny_run, tmp_path) -> None:
    import re

    pytest.importorskip("matplotlib")
    from vlattn.demo import write_demo_report

    page = write_demo_report([tiny_run], tiny_run.parent / "data", tmp_path / "report")
    links = re.findall(r"<a href='([^']+)'", page.read_text())
    assert links == ["image-130/index.html", "image-131/index.html", "image-132/index.html"]  # the first test ids
    assert all((page.parent / link).is_file() for link in links)
    before = page.read_bytes()
    assert write_demo_report([tiny_run], tiny_run.parent / "data", tmp_path / "report") == page
    assert page.read_bytes() == before  # kept, not rewritten
