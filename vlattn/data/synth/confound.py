"""The confounded variant: attribute/shape and shape/shape pairs bound together in the training split only,
optionally with weak visual evidence for what they bind.

``Confound(pairs=(("red", "circle"),), p=0.9)`` makes every circle of the *train* split red with
probability 0.9 (any other colour otherwise, uniformly); in val and test, colours are uniform again,
so a model that learned "circle => red" from the training data is caught out. An attribute is a
colour or a size. The realised co-occurrence rates per split are measured by :func:`cooccurrence`.

Why the evidence knobs exist: with every object drawn clearly, the region extractor (a CNN trained to read colour,
:mod:`.extractor`) puts each object's colour into its feature, so a captioner names a circle's colour from the
feature and never needs the training prior "circles are red" — the confound biases nothing (with clear objects
the baseline's colour words are 98% correct). Real detector features are ambiguous, and captioners fall back on
co-occurrence (CATT, Table 2: A@Attr 41-56%, CHAIR_s 12-13.5 for the baselines). Two knobs make the synthetic
features ambiguous in the same way, in every split alike (so the evidence is as weak at test as in training):

- ``ambiguous`` (a fraction of all objects, every split) with ``contrast``: those objects are drawn "in shadow",
  their fill pulled towards one neutral grey (:mod:`.evidence`): at contrast 0 every colour looks the same, so the
  feature cannot tell the colour, while the captions still state the true one. The extractor is not taught their
  colours (their colour label is ignored in its training), so the colour it reads off them is at chance. The
  Bayes-optimal caption of an ambiguous train circle is then "red circle" (p = 0.9), which is wrong for 7 of 8
  ambiguous test circles: the A@Attr / ``red:circle`` bias the paper measures.
- ``cooccur`` (shape pairs A:B, e.g. circle:star) with ``cooccur_p``: in train, an image holding an A holds a B with
  probability ``cooccur_p`` (shapes are edited after the layout is drawn, :mod:`.cooccur`); val/test keep the
  independent shapes. ``missed``: the detector misses that fraction of B objects (no region box, every split), so
  evidence for B is often absent; captions still mention the B. A captioner then learns "A => say B", which at
  test names B in images that lack it: object hallucination, what CHAIR counts (the paper's main bias measure).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from vlattn.errors import ConfigError

from .lexicon import COLOURS, SHAPES, SIZES

# Draws (colour, size) for an object of the given shape.
AttributeSampler = Callable[[np.random.Generator, str], tuple[str, str]]
ATTRIBUTE_VALUES: dict[str, tuple[str, ...]] = {"colour": tuple(COLOURS), "size": SIZES}


def attribute_kind(value: str) -> str:
    """``"colour"`` or ``"size"`` for an attribute value; :class:`ConfigError` for anything else."""
    for kind, values in ATTRIBUTE_VALUES.items():
        if value in values:
            return kind
    known = ", ".join(v for values in ATTRIBUTE_VALUES.values() for v in values)
    raise ConfigError(f"confound attribute {value!r} is not a colour or size (known: {known})")


def parse_pairs(specs: Sequence[str], what: str, example: str) -> tuple[tuple[str, str], ...]:
    """``"a:b"`` strings -> ((a, b), ...), lower-cased; :class:`ConfigError` naming ``what`` for a malformed one."""
    pairs = []
    for spec in specs:
        first, sep, second = spec.partition(":")
        if not sep:
            raise ConfigError(f"{what} {spec!r} is not of the form {example}")
        pairs.append((first.strip().lower(), second.strip().lower()))
    return tuple(pairs)


# The fields that are probabilities or fractions, and how an error names them.
FRACTIONS = {"p": "confound probability", "cooccur_p": "cooccur probability", "ambiguous": "ambiguous fraction",
             "contrast": "ambiguous contrast", "missed": "missed fraction"}


def _fraction(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must be in [0, 1], got {value}")


@dataclass(frozen=True)
class Confound:
    """Pairs ``(attribute value, shape)`` that co-occur with probability ``p`` in the train split; shape pairs
    ``cooccur`` (A, B): a train image with an A holds a B with probability ``cooccur_p``; weak evidence:
    ``ambiguous`` (fraction of objects drawn in shadow, colour pulled to grey by 1 - ``contrast``) and ``missed``
    (fraction of the B objects the detector misses), in every split. See the module docstring for why."""

    pairs: tuple[tuple[str, str], ...] = ()
    p: float = 0.9
    cooccur: tuple[tuple[str, str], ...] = ()
    cooccur_p: float = 0.9
    ambiguous: float = 0.0
    contrast: float = 0.0
    missed: float = 0.0

    def __post_init__(self) -> None:
        if not self.pairs and not self.cooccur:
            raise ConfigError("confound needs at least one attribute:shape (--confound) or shape:shape (--cooccur) pair")
        for name, what in FRACTIONS.items():
            _fraction(what, getattr(self, name))
        bound: set[tuple[str, str]] = set()
        for value, shape in self.pairs:
            _known_shape(shape, "confound")
            key = (attribute_kind(value), shape)
            if key in bound:
                raise ConfigError(f"confound binds the {key[0]} of {shape!r} twice")
            bound.add(key)
        shapes = [shape for pair in self.cooccur for shape in pair]
        for shape in shapes:
            _known_shape(shape, "cooccur")
        if len(set(shapes)) < len(shapes):
            raise ConfigError(f"cooccur pairs must name distinct shapes, got {', '.join(map(':'.join, self.cooccur))}")
        if self.cooccur and any(attribute_kind(value) == "size" for value, _ in self.pairs):
            raise ConfigError("cooccur cannot be combined with a size confound (co-occurrence edits keep each box)")
        if self.missed and not self.cooccur:
            raise ConfigError("missed applies to the second shape of a cooccur pair; give --cooccur A:B")

    @classmethod
    def parse(cls, specs: Sequence[str], p: float = 0.9, *, cooccur: Sequence[str] = (), **evidence: float
              ) -> Confound:
        """Build from ``"attribute:shape"`` strings, e.g. ``["red:circle", "large:star"]``, and ``"shape:shape"``
        strings ``cooccur`` (e.g. ``["circle:star"]``); ``evidence``: ``cooccur_p``, ``ambiguous``, ``contrast``,
        ``missed``."""
        return cls(parse_pairs(specs, "confound", "attribute:shape (e.g. red:circle)"), p,
                   parse_pairs(cooccur, "cooccur", "shape:shape (e.g. circle:star)"), **evidence)

    @property
    def evidence(self) -> bool:
        """Whether any visual evidence is weakened (ambiguous objects or missed detections)."""
        return self.ambiguous > 0 or self.missed > 0

    def to_json(self) -> dict:
        """The options as written to ``confound.json``."""
        return {
            "pairs": [{"attribute": v, "kind": attribute_kind(v), "shape": s} for v, s in self.pairs],
            "p": self.p,
            "cooccur": [{"shape": a, "with": b} for a, b in self.cooccur],
            "cooccur_p": self.cooccur_p,
            "confounded_splits": ["train"],
            "ambiguous": self.ambiguous,
            "ambiguous_contrast": self.contrast,
            "missed": self.missed,
        }


def _known_shape(shape: str, what: str) -> None:
    if shape not in SHAPES:
        raise ConfigError(f"{what} shape {shape!r} is unknown (known: {', '.join(SHAPES)})")


def _draw(rng: np.random.Generator, values: tuple[str, ...], pinned: str | None, p: float) -> str:
    """A uniform draw from ``values``, or ``pinned`` with probability ``p`` and the others uniformly."""
    if pinned is None:
        return values[int(rng.integers(len(values)))]
    if rng.random() < p:
        return pinned
    others = [v for v in values if v != pinned]
    return others[int(rng.integers(len(others)))]


def attribute_sampler(confound: Confound | None, split: str) -> AttributeSampler:
    """The (colour, size) sampler for ``split``: confounded in train, uniform elsewhere."""
    pins: dict[tuple[str, str], str] = {}
    if confound is not None and split == "train":
        pins = {(attribute_kind(v), s): v for v, s in confound.pairs}
    p = confound.p if confound is not None else 0.0

    def sample(rng: np.random.Generator, shape: str) -> tuple[str, str]:
        colour = _draw(rng, ATTRIBUTE_VALUES["colour"], pins.get(("colour", shape)), p)
        size = _draw(rng, ATTRIBUTE_VALUES["size"], pins.get(("size", shape)), p)
        return colour, size

    return sample


def share(part: int, whole: int) -> float | None:
    """``part / whole``, None for an empty ``whole`` (a realised rate over no items)."""
    return part / whole if whole else None


def cooccurrence(objects: Iterable[tuple[str, dict[str, str]]], confound: Confound) -> dict:
    """Realised statistics per split and pair from ``(split, {"shape", "colour", "size"})`` items.

    For each pair: ``shape_objects`` (objects of the shape), ``rate`` = P(attribute | shape),
    ``attribute_objects`` and ``shape_given_attribute`` = P(shape | attribute); plus the rate
    expected without confounding, ``unconfounded_rate`` = 1 / number of values of the attribute.
    """
    counts: dict[str, dict[str, list[int]]] = {}
    for split, obj in objects:
        per_pair = counts.setdefault(split, {f"{v}:{s}": [0, 0, 0] for v, s in confound.pairs})
        for value, shape in confound.pairs:
            has_value = obj[attribute_kind(value)] == value
            cell = per_pair[f"{value}:{shape}"]
            cell[0] += obj["shape"] == shape
            cell[1] += has_value and obj["shape"] == shape
            cell[2] += has_value
    stats: dict = {}
    for split, per_pair in counts.items():
        stats[split] = {}
        for (value, _), (name, (n_shape, n_both, n_value)) in zip(confound.pairs, per_pair.items()):
            stats[split][name] = {
                "shape_objects": n_shape,
                "attribute_objects": n_value,
                "both": n_both,
                "rate": share(n_both, n_shape),
                "shape_given_attribute": share(n_both, n_value),
                "unconfounded_rate": 1.0 / len(ATTRIBUTE_VALUES[attribute_kind(value)]),
            }
    return stats
