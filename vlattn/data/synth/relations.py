"""Spatial relations between two axis-aligned boxes ``(x1, y1, x2, y2)`` in pixels.

Objects in a scene never overlap, so for any two of them at least one of left of / right of /
above / below holds (two disjoint boxes are separated along x or along y). ``next to`` means the
two boxes share a row (their vertical extents overlap) and the horizontal gap between them is at
most ``next_to_gap`` pixels.
"""

from __future__ import annotations

from typing import Callable, Sequence

Box = Sequence[float]


def _left_of(a: Box, b: Box, gap: float) -> bool:
    return a[2] <= b[0]


def _right_of(a: Box, b: Box, gap: float) -> bool:
    return a[0] >= b[2]


def _above(a: Box, b: Box, gap: float) -> bool:
    return a[3] <= b[1]


def _below(a: Box, b: Box, gap: float) -> bool:
    return a[1] >= b[3]


def _next_to(a: Box, b: Box, gap: float) -> bool:
    share_row = min(a[3], b[3]) > max(a[1], b[1])
    return share_row and max(b[0] - a[2], a[0] - b[2]) <= gap


RELATIONS: dict[str, Callable[[Box, Box, float], bool]] = {
    "left of": _left_of,
    "right of": _right_of,
    "above": _above,
    "below": _below,
    "next to": _next_to,
}


def relation_holds(relation: str, a: Box, b: Box, next_to_gap: float) -> bool:
    """True when "``a`` is ``relation`` ``b``" is a true statement about the two boxes."""
    return RELATIONS[relation](a, b, next_to_gap)


def true_relations(a: Box, b: Box, next_to_gap: float) -> list[str]:
    """All relation names that hold from ``a`` to ``b``, in :data:`RELATIONS` order."""
    return [name for name, holds in RELATIONS.items() if holds(a, b, next_to_gap)]
