"""Reading sentences about a synthetic scene back into claims, and spatial-relation probes.

Reading is independent of the grammar (:mod:`.grammar`): a noun phrase is [determiner | number word] [size]
[colour] noun; a relation phrase is one of the fixed word sequences of :data:`.lexicon.RELATION_WORDS`. The
tests of the grammar check every reference caption with it; captioning benchmarks check generated captions:

- :func:`relation_verdicts`: for every relation phrase of a tokenised caption, whether some objects matching
  its subject and anchor descriptions stand in that relation (False also when no object matches);
- :func:`relation_probes`: for every ordered pair of objects that a full description (size, colour, shape)
  names uniquely, the sentences "<a> is <relation words> <b>" for each relation, to score a captioner's
  choice of relation by the likelihood it gives each sentence (a forced choice among the five relations).

Scenes are ``scenes.json`` image records: ``{"width", "objects": [{"shape", "colour", "size", "box"}]}``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .grammar import with_article
from .lexicon import COLOUR_OF_WORD, COLOUR_WORDS, GENERIC_NOUNS, NUMBER_WORDS, RELATION_WORDS, SHAPE_OF_WORD, SHAPE_WORDS, SIZE_OF_WORD, SIZE_WORDS
from .relations import relation_holds, true_relations

DETERMINERS = frozenset({"a", "an", "the"})
# (words, relation), longest first so that "to the left of" is found before "left of"
RELATION_PHRASES: list[tuple[tuple[str, ...], str]] = sorted(
    ((tuple(p.split()), rel) for rel, ps in RELATION_WORDS.items() for p in ps), key=lambda x: -len(x[0])
)


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
    """Indices of the objects having every attribute in ``attrs``."""
    return [k for k, o in enumerate(objects) if all(o[key] == value for key, value in attrs.items())]


def find(tokens: list[str], phrase: tuple[str, ...]) -> list[int]:
    """Start indices of ``phrase`` in ``tokens``."""
    return [i for i in range(len(tokens) - len(phrase) + 1) if tuple(tokens[i : i + len(phrase)]) == phrase]


def around(phrases: list[NounPhrase], start: int, end: int) -> tuple[NounPhrase, NounPhrase] | None:
    """(subject, anchor) of a relation or position phrase spanning tokens start:end, or None without one.

    "X [is] REL Y" has the subject before; "REL Y [there] is X" has it after the anchor.
    """
    before = [p for p in phrases if p.end in (start, start - 1)]
    after = [p for p in phrases if p.start >= end]
    if before:
        return before[-1], (after[0] if after else before[-1])
    if not after:
        return None
    return after[1] if len(after) > 1 else after[0], after[0]


def relation_statements(tokens: list[str]) -> list[tuple[str, NounPhrase, NounPhrase] | tuple[str, None, None]]:
    """(relation, subject, anchor) for every relation phrase of ``tokens`` (longest phrases first, no overlap);
    subject and anchor are None when the phrase has no noun phrase to attach to."""
    phrases, consumed, found = noun_phrases(tokens), set(), []
    for words, relation in RELATION_PHRASES:
        for start in find(tokens, words):
            span = set(range(start, start + len(words)))
            if span & consumed:
                continue
            consumed |= span
            pair = around(phrases, start, start + len(words))
            found.append((relation, *pair) if pair else (relation, None, None))
    return found


def statement_holds(
    relation: str, subject: NounPhrase | None, anchor: NounPhrase | None, objects: list[dict], next_to_gap: float
) -> bool:
    """True if an object matching ``subject`` stands in ``relation`` to another object matching ``anchor``."""
    return subject is not None and anchor is not None and any(
        relation_holds(relation, objects[a]["box"], objects[b]["box"], next_to_gap)
        for a in matching(objects, subject.attrs) for b in matching(objects, anchor.attrs) if a != b
    )


def relation_verdicts(tokens: list[str], scene: dict, next_to_gap: float) -> list[bool]:
    """One verdict (:func:`statement_holds`) per relation phrase of ``tokens``."""
    return [statement_holds(*statement, scene["objects"], next_to_gap) for statement in relation_statements(tokens)]


@dataclass
class RelationProbe:
    """Objects ``subject`` and ``anchor`` (indices), the relations that hold from one to the other, and for
    each relation the sentences (token lists) that state it, one per synonym."""

    subject: int
    anchor: int
    holds: frozenset[str]
    sentences: dict[str, list[list[str]]]


def full_description(obj: dict) -> str:
    """"a large red circle": size, colour and the first shape word, with its article."""
    return with_article(f"{SIZE_WORDS[obj['size']][0]} {COLOUR_WORDS[obj['colour']][0]} {SHAPE_WORDS[obj['shape']][0][0]}")


def relation_probes(scene: dict, next_to_gap: float) -> list[RelationProbe]:
    """Probes for every ordered pair of distinct objects whose full descriptions name them uniquely."""
    objects = scene["objects"]
    unique = [k for k, o in enumerate(objects) if len(matching(objects, {a: o[a] for a in ("size", "colour", "shape")})) == 1]
    probes = []
    for a in unique:
        for b in unique:
            if a == b:
                continue
            subject, anchor = full_description(objects[a]), full_description(objects[b])
            sentences = {
                relation: [f"{subject} is {words} {anchor}".split() for words in synonyms]
                for relation, synonyms in RELATION_WORDS.items()
            }
            holds = frozenset(true_relations(objects[a]["box"], objects[b]["box"], next_to_gap))
            probes.append(RelationProbe(a, b, holds, sentences))
    return probes
