"""Reference captions: five distinct sentences per image, every claim true of the scene."""

from __future__ import annotations

from pathlib import Path

import pytest
from synth_claims import check_caption

from vlattn.data.karpathy import load_karpathy
from vlattn.data.synth.relations import relation_holds, true_relations
from vlattn.text import tokenize


def test_five_distinct_captions_per_image(synth_dir: Path) -> None:
    for entry in load_karpathy(synth_dir / "dataset.json"):
        assert len(entry.raw) == 5 and len(set(entry.raw)) == 5, entry.raw
        assert entry.captions == [tokenize(r) for r in entry.raw]
        assert all(len(c) <= 20 for c in entry.captions)  # the decoders' default maximum length


def test_every_caption_claim_holds(synth_dir: Path, scenes: dict[int, dict], next_to_gap: float) -> None:
    for entry in load_karpathy(synth_dir / "dataset.json"):
        for tokens, raw in zip(entry.captions, entry.raw):
            try:
                check_caption(tokens, scenes[entry.image_id], next_to_gap)
            except AssertionError as err:
                raise AssertionError(f"image {entry.image_id}: {raw!r}: {err}") from None


def test_captions_use_counts_relations_positions_and_synonyms(synth_dir: Path) -> None:
    words = {t for e in load_karpathy(synth_dir / "dataset.json") for c in e.captions for t in c}
    assert {"two", "three", "left", "right", "above", "next", "corner"} <= words
    assert {"disk", "big", "little"} & words and {"circle", "large", "small"} & words


SCENE = {
    "width": 80, "height": 80,
    "objects": [
        {"shape": "circle", "colour": "red", "size": "large", "box": [5, 5, 30, 30]},
        {"shape": "square", "colour": "blue", "size": "small", "box": [40, 10, 52, 22]},
        {"shape": "square", "colour": "green", "size": "small", "box": [60, 60, 72, 72]},
    ],
}  # fmt: skip


@pytest.mark.parametrize(
    "caption",
    ["a red circle left of a blue square", "two squares and one circle",
     "in the top left corner there is a big red disk", "to the right of a large circle is a green box",
     "three shapes on a plain background"],
)
def test_claim_checker_accepts_true_captions(caption: str) -> None:
    check_caption(tokenize(caption), SCENE, 16.0)


@pytest.mark.parametrize(
    "caption",
    ["a blue circle", "three squares", "a blue square left of a red circle", "two objects in the picture",
     "a small circle", "a green square in the top left corner", "below a red circle is a blue box", "a green violet"],
)
def test_claim_checker_rejects_false_captions(caption: str) -> None:
    with pytest.raises(AssertionError):
        check_caption(tokenize(caption), SCENE, 16.0)


def test_relation_definitions() -> None:
    a, b = (0, 0, 10, 10), (14, 2, 24, 12)
    assert true_relations(a, b, 5.0) == ["left of", "next to"]
    assert true_relations(b, a, 5.0) == ["right of", "next to"]
    assert true_relations(a, b, 3.0) == ["left of"]
    c = (2, 20, 8, 30)
    assert true_relations(a, c, 100.0) == ["above"] and true_relations(c, a, 100.0) == ["below"]
    assert not relation_holds("next to", a, c, 100.0)  # different rows
