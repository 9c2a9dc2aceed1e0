"""Scene layouts: 1-5 non-overlapping objects with a shape, colour, size and pixel box.

The image is divided into a 3 x 3 grid of cells; each object takes its own cell and a random place
inside it. Placement therefore never fails, so no attribute (a large size, say) is ever dropped
more often than another, and the attribute statistics are exactly those of the sampler.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .confound import AttributeSampler
from .lexicon import SHAPES

MAX_OBJECTS = 5
ATTRIBUTE_KEYS = ("size", "colour", "shape")
CELLS = 3  # cells per image side
# Object side as a fraction of the image side, per size; a large object still fits in its cell.
SIDE_RANGE: dict[str, tuple[float, float]] = {"small": (0.13, 0.18), "large": (0.26, 0.30)}


@dataclass(frozen=True)
class SceneObject:
    """One object; ``box`` is its tight pixel box (x1, y1, x2, y2)."""

    shape: str
    colour: str
    size: str
    box: tuple[int, int, int, int]
    ambiguous: bool = False  # drawn in shadow: its colour barely visible (see .evidence)

    @property
    def attributes(self) -> dict[str, str]:
        """``{"size", "colour", "shape"}`` values."""
        return {key: getattr(self, key) for key in ATTRIBUTE_KEYS}

    def to_json(self) -> dict:
        """``{"size", "colour", "shape", "box"}``, and ``"ambiguous": true`` for an object drawn in shadow."""
        return {**self.attributes, "box": list(self.box), **({"ambiguous": True} if self.ambiguous else {})}


@dataclass(frozen=True)
class Scene:
    """The ground truth of one square image of side ``image_size`` pixels."""

    image_id: int
    split: str
    image_size: int
    objects: tuple[SceneObject, ...]

    @property
    def next_to_gap(self) -> float:
        """Largest horizontal gap (pixels) for two objects in one row to count as "next to"."""
        return 0.2 * self.image_size


def _cell_span(index: int, image_size: int) -> tuple[int, int]:
    """First and last pixel coordinate an object may occupy in cell ``index`` along one axis; one
    pixel is kept free at each cell border, so objects in neighbouring cells never touch."""
    cell = image_size / CELLS
    return math.ceil(index * cell) + 1, math.floor((index + 1) * cell) - 1


def place(
    rng: np.random.Generator, cell: int, shape: str, colour: str, size: str, image_size: int
) -> SceneObject:
    """An object of the given attributes at a random place in ``cell`` (0..8, row by row) with a side drawn for
    its size."""
    row, column = divmod(cell, CELLS)
    (x_lo, x_hi), (y_lo, y_hi) = _cell_span(column, image_size), _cell_span(row, image_size)
    side = min(int(round(rng.uniform(*SIDE_RANGE[size]) * image_size)), x_hi - x_lo, y_hi - y_lo)
    x1, y1 = int(rng.integers(x_lo, x_hi - side + 1)), int(rng.integers(y_lo, y_hi - side + 1))
    return SceneObject(shape, colour, size, (x1, y1, x1 + side, y1 + side))


def cell_of(obj: SceneObject, image_size: int) -> int:
    """The cell (0..8, row by row) holding ``obj``."""
    column, row = (min(int(CELLS * v / image_size), CELLS - 1) for v in obj.box[:2])
    return row * CELLS + column


def sample_scene(
    rng: np.random.Generator, image_id: int, split: str, image_size: int, attributes: AttributeSampler
) -> Scene:
    """Draw 1-5 objects (shapes uniform, colour/size from ``attributes``) in distinct random cells."""
    count = int(rng.integers(1, MAX_OBJECTS + 1))
    objects = []
    for cell in rng.choice(CELLS * CELLS, size=count, replace=False):
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        colour, size = attributes(rng, shape)
        objects.append(place(rng, int(cell), shape, colour, size, image_size))
    return Scene(image_id, split, image_size, tuple(objects))
