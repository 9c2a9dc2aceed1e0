"""Relation verdicts on generated captions and the forced-choice relation probes (vlattn.data.synth.claims),
on a hand-made scene."""

from __future__ import annotations

from vlattn.data.synth.claims import relation_probes, relation_verdicts
from vlattn.text import tokenize

SCENE = {
    "width": 80, "height": 80,
    "objects": [
        {"shape": "circle", "colour": "red", "size": "large", "box": [5, 5, 30, 30]},
        {"shape": "square", "colour": "blue", "size": "small", "box": [40, 10, 52, 22]},
        {"shape": "square", "colour": "blue", "size": "small", "box": [60, 60, 72, 72]},  # same description as 1
        {"shape": "star", "colour": "purple", "size": "small", "box": [5, 60, 17, 72]},
    ],
}  # fmt: skip


def verdicts(caption: str) -> list[bool]:
    return relation_verdicts(tokenize(caption), SCENE, 16.0)


def test_relation_verdicts() -> None:
    assert verdicts("a red circle is to the left of a blue square") == [True]
    assert verdicts("a red circle is right of a blue square") == [False]
    assert verdicts("above a star there is a big red disk") == [True]  # subject after the anchor
    assert verdicts("a star below a circle and a circle next to a square") == [True, True]
    assert verdicts("a green circle above a star") == [False]  # no green circle: a false statement
    assert verdicts("a blue square below a blue box") == [True]  # 2 below 1, two distinct objects
    assert verdicts("it is to the left of") == [False]  # a relation phrase relating nothing
    assert verdicts("two squares and one circle") == []


def test_relation_probes_cover_uniquely_described_pairs() -> None:
    probes = relation_probes(SCENE, 16.0)
    assert {(p.subject, p.anchor) for p in probes} == {(0, 3), (3, 0)}  # the blue squares are ambiguous
    circle_star = next(p for p in probes if p.subject == 0)
    assert circle_star.holds == {"above"}
    assert circle_star.sentences["above"] == [
        "a large red circle is above a small purple star".split(), "a large red circle is over a small purple star".split(),
    ]
    assert len(circle_star.sentences["left of"]) == 2 and circle_star.sentences["left of"][0][5:9] == ["to", "the", "left", "of"]
    assert len(circle_star.sentences["below"]) == 3 and set(circle_star.sentences) == {"left of", "right of", "above", "below", "next to"}
    assert next(p for p in probes if p.subject == 3).holds == {"below"}
