"""Bias metrics of generated captions (CATT, Sec. 4.3.1, Table 2): object hallucination (CHAIR) and attribute
accuracy (A@Attr).

- CHAIR (Rohrbach et al. 2018, "Object Hallucination in Image Captioning", Sec. 3), per caption the set of objects
  it mentions (a word or multi-word phrase of an object's synonym list; each object counted once per caption):

      CHAIR_i = |{hallucinated objects}| / |{objects mentioned}|     (summed over captions)
      CHAIR_s = |{captions with a hallucinated object}| / |{captions}|

  An object is hallucinated when the image's ground-truth objects lack it.
- A@Attr: the accuracy of attribute (colour) words. A colour word that modifies a noun phrase ("a small red circle":
  colour, then modifiers such as sizes or other colours, then the noun) is correct when the image has an object of
  that kind with that colour; before a generic noun ("two red objects"), when any of its objects has that colour.
  Colour words that modify nothing the lexicon knows are not counted. The CATT paper reports "the accuracy of these
  words" without a finer definition; this is ours.

Words are matched on the caption's PTB tokens (:func:`vlattn.text.tokenize`). A word the lexicon lacks is
also tried in a singular form (``-s``, ``-es``, ``-ies`` -> ``-y``, a few irregular plurals), as CHAIR singularises
caption words.
This module holds the definitions only; the lexicons and ground truth of a data set are in
:mod:`vlattn.data.bias`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vlattn.text import tokenize
from vlattn.errors import DataError

GENERIC = "<any>"  # the "object" of a colour word before a generic noun


@dataclass(frozen=True)
class Lexicon:
    """Words of a data set: ``objects`` maps a word sequence to its object, ``attributes`` a word to its attribute
    value (colours), ``modifiers`` are the other words that may stand between an attribute and its noun,
    ``generic`` the nouns naming any object."""

    objects: Mapping[tuple[str, ...], str]
    attributes: Mapping[str, str]
    modifiers: frozenset[str] = frozenset()
    generic: frozenset[str] = frozenset()

    @property
    def longest(self) -> int:
        return max((len(words) for words in self.objects), default=1)

    def object_at(self, tokens: list[str], start: int) -> tuple[str, int] | None:
        """The object named by the longest phrase starting at ``tokens[start]`` and the phrase length, or None."""
        for length in range(min(self.longest, len(tokens) - start), 0, -1):
            words = tokens[start:start + length]
            for candidate in [words] + [words[:-1] + [singular] for singular in singular_forms(words[-1])]:
                found = self.objects.get(tuple(candidate))
                if found is not None:
                    return found, length
        return None

    def modified(self, tokens: list[str], start: int) -> str | None:
        """The object (or :data:`GENERIC`) that the attribute word at ``tokens[start]`` modifies, or None."""
        head = start + 1
        while head < len(tokens) and (tokens[head] in self.modifiers or tokens[head] in self.attributes):
            head += 1
        if head == len(tokens):
            return None
        named = self.object_at(tokens, head)
        if named is not None:
            return named[0]
        return GENERIC if tokens[head] in self.generic else None


# irregular plurals of common caption nouns
IRREGULAR_PLURALS: dict[str, str] = {
    "men": "man", "women": "woman", "people": "person", "children": "child", "feet": "foot", "teeth": "tooth",
    "mice": "mouse", "geese": "goose", "knives": "knife", "leaves": "leaf", "wolves": "wolf", "shelves": "shelf",
    "loaves": "loaf", "halves": "half", "oxen": "ox",
}


def singular_forms(word: str) -> list[str]:
    """Candidate singulars of ``word``: ``boxes`` -> ``boxe``, ``box``; ``ponies`` -> ``pony``; ``women`` ->
    ``woman`` (:data:`IRREGULAR_PLURALS`)."""
    forms = [IRREGULAR_PLURALS[word]] if word in IRREGULAR_PLURALS else []
    if word.endswith("ies") and len(word) > 3:
        forms.append(word[:-3] + "y")
    if word.endswith("es") and len(word) > 2:
        forms.append(word[:-2])
    if word.endswith("s") and len(word) > 1:
        forms.append(word[:-1])
    return forms


@dataclass(frozen=True)
class Mentions:
    """What one caption says: ``objects`` in order of mention, ``attributes`` (attribute value, object or
    :data:`GENERIC`) pairs."""

    objects: list[str]
    attributes: list[tuple[str, str]]


def read_caption(caption: str, lexicon: Lexicon) -> Mentions:
    """The objects and attribute-object pairs ``caption`` mentions."""
    tokens = tokenize(caption)
    objects, attributes = [], []
    index = 0
    while index < len(tokens):
        value = lexicon.attributes.get(tokens[index])
        modified = None if value is None else lexicon.modified(tokens, index)
        if modified is not None:  # an attribute word before its noun ("orange" in "an orange cat")
            attributes.append((value, modified))
            index += 1
            continue
        found = lexicon.object_at(tokens, index)
        if found is not None:
            objects.append(found[0])
        index += found[1] if found is not None else 1
    return Mentions(objects, attributes)


@dataclass(frozen=True)
class Truth:
    """One image's ground truth: its ``objects`` and (attribute value, object) ``pairs``."""

    objects: frozenset[str]
    pairs: frozenset[tuple[str, str]] = frozenset()

    def has(self, attribute: str, obj: str) -> bool:
        if obj == GENERIC:
            return any(value == attribute for value, _ in self.pairs)
        return (attribute, obj) in self.pairs


@dataclass
class BiasReport:
    """``scores`` (CHAIR_s, CHAIR_i, A@Attr in [0, 1]; A@Attr absent when no caption has a colour-noun pair),
    ``counts`` behind them, ``attribute_by_object`` {object: [correct, total]}, ``hallucinated`` {object: count}."""

    scores: dict[str, float]
    counts: dict[str, int]
    attribute_by_object: dict[str, list[int]] = field(default_factory=dict)
    hallucinated: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"scores": self.scores, "counts": self.counts, "attribute_by_object": self.attribute_by_object,
                "hallucinated": self.hallucinated}


def bias_scores(captions: Mapping[int, str], truth: Mapping[int, Truth], lexicon: Lexicon) -> BiasReport:
    """CHAIR_s, CHAIR_i and A@Attr of ``captions`` {image id: caption} against ``truth`` {image id: Truth}."""
    missing = [image_id for image_id in captions if image_id not in truth]
    if missing:
        raise DataError(f"no ground-truth objects for image ids {missing[:10]}")
    sentences = hallucinated_sentences = mentioned = 0
    hallucinated: Counter[str] = Counter()
    by_object: dict[str, list[int]] = {}
    for image_id, caption in captions.items():
        mentions, gt = read_caption(caption, lexicon), truth[image_id]
        objects = set(mentions.objects)
        wrong = objects - gt.objects
        sentences += 1
        hallucinated_sentences += bool(wrong)
        mentioned += len(objects)
        hallucinated.update(wrong)
        for value, obj in mentions.attributes:
            cell = by_object.setdefault(obj, [0, 0])
            cell[0] += gt.has(value, obj)
            cell[1] += 1
    correct, total = sum(c for c, _ in by_object.values()), sum(t for _, t in by_object.values())
    scores = {"CHAIR_s": hallucinated_sentences / sentences if sentences else 0.0,
              "CHAIR_i": sum(hallucinated.values()) / mentioned if mentioned else 0.0}
    if total:
        scores["A@Attr"] = correct / total
    counts = {"captions": sentences, "captions_hallucinating": hallucinated_sentences, "objects_mentioned": mentioned,
              "objects_hallucinated": sum(hallucinated.values()), "attributes": total, "attributes_correct": correct}
    return BiasReport(scores, counts, dict(sorted(by_object.items())), dict(sorted(hallucinated.items())))


def read_synonyms(path: str | Path, attributes: Mapping[str, str], modifiers: Iterable[str] = ()) -> Lexicon:
    """A lexicon from a synonym file in the CHAIR format (one object per line: ``name, synonym, synonym, ...``; the
    first entry names the object; entries may be several words) and the given attribute words."""
    path = Path(path)
    if not path.is_file():
        raise DataError("synonym file not found", path=path)
    objects: dict[tuple[str, ...], str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        entries = [entry.strip().lower() for entry in line.split(",") if entry.strip()]
        if not entries:
            continue
        for entry in entries:
            words = tuple(entry.split())
            if objects.get(words, entries[0]) != entries[0]:
                raise DataError(f"{entry!r} is a synonym of {objects[words]!r} and of {entries[0]!r}", path=path,
                                item=f"line {number}")
            objects[words] = entries[0]
    if not objects:
        raise DataError("no objects in the synonym file", path=path)
    return Lexicon(objects, dict(attributes), frozenset(modifiers))
