"""Checking every claim of a sentence against its scene, independently of the grammar: noun phrases and
relation phrases are read by :mod:`vlattn.data.synth.claims`; position phrases are fixed word sequences here.
"""

from __future__ import annotations

from vlattn.data.synth.claims import around, find, matching, noun_phrases, relation_statements, statement_holds
from vlattn.data.synth.lexicon import COLOUR_OF_WORD, SHAPE_OF_WORD, SIZE_OF_WORD

__all__ = ["check_caption", "matching", "noun_phrases"]

ATTRIBUTE_WORDS = SHAPE_OF_WORD.keys() | COLOUR_OF_WORD.keys() | SIZE_OF_WORD.keys()
# Position phrase -> (column, row) of the object's centre in a 3 x 3 division of the image.
POSITIONS = {
    "in the top left corner": (0, 0), "at the top": (1, 0), "in the top right corner": (2, 0),
    "on the left": (0, 1), "in the centre": (1, 1), "on the right": (2, 1),
    "in the bottom left corner": (0, 2), "at the bottom": (1, 2), "in the bottom right corner": (2, 2),
}  # fmt: skip


def check_caption(tokens: list[str], scene: dict, next_to_gap: float) -> None:
    """Assert that every claim of a caption holds for the scene (``scenes.json`` image record)."""
    objects, phrases = scene["objects"], noun_phrases(tokens)
    covered = {i for p in phrases for i in range(p.start, p.end)}
    stray = [t for i, t in enumerate(tokens) if i not in covered and t in ATTRIBUTE_WORDS]
    assert not stray, f"attribute words outside noun phrases: {stray}"
    for p in phrases:
        found = matching(objects, p.attrs)
        assert found, f"no object is {p.attrs}"
        assert p.count in (None, len(found)), f"{p.count} objects claimed for {p.attrs}, {len(found)} present"
    for relation, subject, anchor in relation_statements(tokens):
        assert statement_holds(relation, subject, anchor, objects, next_to_gap), f"{subject} is not {relation} {anchor}"
    for text, cell in POSITIONS.items():
        for start in find(tokens, tuple(text.split())):
            subject, _ = around(phrases, start, start + len(text.split()))
            cells = [cell_of(objects[k]["box"], scene["width"]) for k in matching(objects, subject.attrs)]
            assert cell in cells, f"no {subject.attrs} {text}"


def cell_of(box: list[float], size: int) -> tuple[int, int]:
    """(column, row) of the box centre in a 3 x 3 division of a square image of side ``size``."""
    return min(int(1.5 * (box[0] + box[2]) / size), 2), min(int(1.5 * (box[1] + box[3]) / size), 2)
