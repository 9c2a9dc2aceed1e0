"""The confounded variant: attribute/shape pairs bound together in the training split only.

``Confound(pairs=(("red", "circle"),), p=0.9)`` makes every circle of the *train* split red with
probability 0.9 (any other colour otherwise, uniformly); in val and test, colours are uniform again,
so a model that learned "circle => red" from the training data is caught out. An attribute is a
colour or a size. The realised co-occurrence rates per split are measured by :func:`cooccurrence`.
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


@dataclass(frozen=True)
class Confound:
    """Pairs ``(attribute value, shape)`` that co-occur with probability ``p`` in the train split."""

    pairs: tuple[tuple[str, str], ...]
    p: float = 0.9

    def __post_init__(self) -> None:
        if not self.pairs:
            raise ConfigError("confound needs at least one attribute:shape pair")
        if not 0.0 <= self.p <= 1.0:
            raise ConfigError(f"confound probability must be in [0, 1], got {self.p}")
        bound: set[tuple[str, str]] = set()
        for value, shape in self.pairs:
            if shape not in SHAPES:
                raise ConfigError(f"confound shape {shape!r} is unknown (known: {', '.join(SHAPES)})")
            key = (attribute_kind(value), shape)
            if key in bound:
                raise ConfigError(f"confound binds the {key[0]} of {shape!r} twice")
            bound.add(key)

    @classmethod
    def parse(cls, specs: Sequence[str], p: float = 0.9) -> Confound:
        """Build from ``"attribute:shape"`` strings, e.g. ``["red:circle", "large:star"]``."""
        pairs = []
        for spec in specs:
            value, sep, shape = spec.partition(":")
            if not sep:
                raise ConfigError(f"confound {spec!r} is not of the form attribute:shape (e.g. red:circle)")
            pairs.append((value.strip().lower(), shape.strip().lower()))
        return cls(tuple(pairs), p)

    def to_json(self) -> dict:
        """The options as written to ``confound.json``."""
        return {
            "pairs": [{"attribute": v, "kind": attribute_kind(v), "shape": s} for v, s in self.pairs],
            "p": self.p,
            "confounded_splits": ["train"],
        }


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
                "rate": n_both / n_shape if n_shape else None,
                "shape_given_attribute": n_both / n_value if n_value else None,
                "unconfounded_rate": 1.0 / len(ATTRIBUTE_VALUES[attribute_kind(value)]),
            }
    return stats
