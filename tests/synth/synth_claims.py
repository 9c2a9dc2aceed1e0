"""Reading generated sentences back into claims about a scene, independently of the grammar.

A noun phrase is [determiner | number word] [size] [colour] noun; a relation phrase and a position
phrase are fixed word sequences. The checks compare each claim with the scene's objects and boxes.
"""

from __future__ import annotations

from dataclasses import dataclass

from vlattn.data.synth.lexicon import (
    COLOUR_OF_WORD, GENERIC_NOUNS, NUMBER_WORDS, RELATION_WORDS, SHAPE_OF_WORD, SIZE_OF_WORD,
)
from vlattn.data.synth.relations import relation_holds

DETERMINERS = frozenset({"a", "an", "the"})
RELATION_PHRASES = sorted(
    ((tuple(p.split()), rel) for rel, ps in RELATION_WORDS.items() for p in ps), key=lambda x: -len(x[0])
)
ATTRIBUTE_WORDS = SHAPE_OF_WORD.keys() | COLOUR_OF_WORD.keys() | SIZE_OF_WORD.keys()
# Position phrase -> (column, row) of the object's centre in a 3 x 3 division of the image.
POSITIONS = {
    "in the top left corner": (0, 0), "at the top": (1, 0), "in the top right corner": (2, 0),
    "on the left": (0, 1), "in the centre": (1, 1), "on the right": (2, 1),
    "in the bottom left corner": (0, 2), "at the bottom": (1, 2), "in the bottom right corner": (2, 2),
}  # fmt: skip


@dataclass
class NounPhrase:
    start: int
    end: int  # exclusive token index
    attrs: dict[str, str]
    count: int | None  # exact count when introduced by a number word


def noun_phrases(tokens: list[str]) -> list[NounPhrase]:
    """Every noun phrase in ``tokens``, left to right."""
    found, i = [], 0
    while i < len(tokens):
        j, count, attrs = i, None, {}
        if tokens[j] in NUMBER_WORDS:
            count, j = NUMBER_WORDS.index(tokens[j]), j + 1
        elif tokens[j] in DETERMINERS:
            j += 1
        for key, words in (("size", SIZE_OF_WORD), ("colour", COLOUR_OF_WORD)):
            if j < len(tokens) and tokens[j] in words:
                attrs[key], j = words[tokens[j]], j + 1
        if j < len(tokens) and (tokens[j] in SHAPE_OF_WORD or tokens[j] in GENERIC_NOUNS):
            if tokens[j] in SHAPE_OF_WORD:
                attrs["shape"] = SHAPE_OF_WORD[tokens[j]]
            found.append(NounPhrase(i, j + 1, attrs, count))
            i = j + 1
        else:
            i += 1
    return found


def matching(objects: list[dict], attrs: dict[str, str]) -> list[int]:
    return [k for k, o in enumerate(objects) if all(o[key] == value for key, value in attrs.items())]


def find(tokens: list[str], phrase: tuple[str, ...]) -> list[int]:
    return [i for i in range(len(tokens) - len(phrase) + 1) if tuple(tokens[i : i + len(phrase)]) == phrase]


def _around(phrases: list[NounPhrase], start: int, end: int) -> tuple[NounPhrase, NounPhrase]:
    """(subject, anchor) of a relation or position phrase spanning tokens start:end.

    "X [is] REL Y" has the subject before; "REL Y [there] is X" has it after the anchor.
    """
    before = [p for p in phrases if p.end in (start, start - 1)]
    after = [p for p in phrases if p.start >= end]
    if before:
        return before[-1], (after[0] if after else before[-1])
    return after[1] if len(after) > 1 else after[0], after[0]


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
    consumed: set[int] = set()
    for words, relation in RELATION_PHRASES:  # longest first: "to the left of" before "left of"
        for start in find(tokens, words):
            span = set(range(start, start + len(words)))
            if span & consumed:
                continue
            consumed |= span
            subject, anchor = _around(phrases, start, start + len(words))
            assert any(
                relation_holds(relation, objects[a]["box"], objects[b]["box"], next_to_gap)
                for a in matching(objects, subject.attrs) for b in matching(objects, anchor.attrs) if a != b
            ), f"no {subject.attrs} is {relation} a {anchor.attrs}"
    for text, cell in POSITIONS.items():
        for start in find(tokens, tuple(text.split())):
            subject, _ = _around(phrases, start, start + len(text.split()))
            cells = [cell_of(objects[k]["box"], scene["width"]) for k in matching(objects, subject.attrs)]
            assert cell in cells, f"no {subject.attrs} {text}"


def cell_of(box: list[float], size: int) -> tuple[int, int]:
    """(column, row) of the box centre in a 3 x 3 division of a square image of side ``size``."""
    return min(int(1.5 * (box[0] + box[2]) / size), 2), min(int(1.5 * (box[1] + box[3]) / size), 2)
