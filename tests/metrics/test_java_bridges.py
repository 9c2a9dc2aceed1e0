"""METEOR (compared with pycocoevalcap's numbers) and SPICE availability; skipped without Java."""

from __future__ import annotations

import pytest

from vlattn.metrics import Meteor, Spice

GTS = {1: ["a man riding a horse", "a person on a horse"], 2: ["two dogs play in the grass", "dogs playing"],
       5: ["a red bus on the street", "a bus parked by the road"]}
RES = {1: ["a man on a horse"], 2: ["a dog in grass"], 5: ["a red bus"]}


# pycocoevalcap 1.2's Meteor().compute_score(GTS, RES) on this machine (recorded rather than run live: each
# METEOR process spends ~20 s loading its paraphrase table, and the test directory must stay fast).
PYCOCOEVALCAP_METEOR = (0.3138668307889446, [0.8666666666666667, 0.14035087719298242, 0.32253203916506945])


def test_meteor_matches_pycocoevalcap() -> None:
    meteor = Meteor()
    if not meteor.available():
        pytest.skip(meteor.reason)
    with meteor:
        score, scores = meteor.compute_score(GTS, RES)
    assert score == pytest.approx(PYCOCOEVALCAP_METEOR[0], abs=1e-12)
    assert scores == pytest.approx(PYCOCOEVALCAP_METEOR[1], abs=1e-12)
    meteor.close()  # idempotent


def test_spice_never_fakes_a_number() -> None:
    spice = Spice()
    if spice.available():
        pytest.skip("SPICE models installed")
    assert spice.reason
    with pytest.raises(RuntimeError, match="SPICE unavailable"):
        spice.compute_score(GTS, RES)


def test_a_prestarted_meteor_is_handed_to_the_next_evaluation_once(monkeypatch) -> None:
    from vlattn.metrics import meteor as meteor_module

    started: list[object] = []
    monkeypatch.setattr(meteor_module.Meteor, "available", lambda self: True)
    monkeypatch.setattr(meteor_module.Meteor, "start", lambda self: started.append(self))
    monkeypatch.setattr(meteor_module, "_prestarted", [])
    meteor_module.prestart()
    meteor_module.prestart()  # one waiting process is enough
    assert len(started) == 1
    assert meteor_module.take_meteor() is started[0]
    fresh = meteor_module.take_meteor()  # nothing waiting any more: a new, not yet started bridge
    assert fresh is not started[0] and len(started) == 1
