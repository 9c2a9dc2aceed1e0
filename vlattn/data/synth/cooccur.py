"""Object co-occurrence confound: in the train split, an image holding a shape A holds a shape B with probability p.

Layouts are drawn as usual (:func:`.scene.sample_scene`: shapes independent and uniform), then, in train only, each
pair (A, B) of ``Confound.cooccur`` edits the scene from its own random stream: if the image holds an A, with
probability p it is made to hold a B (a random object that is neither A nor B becomes a B — same cell, box, size;
colour redrawn for the new shape — or, when every object is an A, a B is added in a free cell if the image has room
for one more object), and otherwise every B becomes another shape that is neither A nor B. Images without an A are
left alone, so P(B | no A) stays the independent rate; val and test keep the independent layouts. The realised
rates per split are measured by :func:`cooccurrence_statistics` (images with an A that hold a B, and the rate in
images without an A).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .confound import AttributeSampler, share
from .lexicon import SHAPES
from .scene import CELLS, MAX_OBJECTS, SceneObject, cell_of, place


def _reshaped(obj: SceneObject, shape: str, rng: np.random.Generator, attributes: AttributeSampler) -> SceneObject:
    """``obj`` as ``shape``, with a colour drawn for that shape (size and box kept)."""
    colour, _ = attributes(rng, shape)
    return SceneObject(shape, colour, obj.size, obj.box, obj.ambiguous)


def impose_cooccurrence(
    objects: Sequence[SceneObject], pair: tuple[str, str], p: float, rng: np.random.Generator,
    attributes: AttributeSampler, image_size: int,
) -> list[SceneObject]:
    """The objects of one train image with pair (A, B) bound: see the module docstring."""
    first, second = pair
    objects = list(objects)
    if not any(o.shape == first for o in objects):
        return objects
    has = any(o.shape == second for o in objects)
    if rng.random() < p:
        if has:
            return objects
        free = [k for k, o in enumerate(objects) if o.shape != first]
        if free:
            k = free[int(rng.integers(len(free)))]
            objects[k] = _reshaped(objects[k], second, rng, attributes)
        elif len(objects) < MAX_OBJECTS:
            used = {cell_of(o, image_size) for o in objects}
            cells = [c for c in range(CELLS * CELLS) if c not in used]
            colour, size = attributes(rng, second)
            objects.append(place(rng, cells[int(rng.integers(len(cells)))], second, colour, size, image_size))
        return objects
    others = [s for s in SHAPES if s not in pair]
    return [_reshaped(o, others[int(rng.integers(len(others)))], rng, attributes) if o.shape == second else o
            for o in objects]


def cooccurrence_statistics(images: Iterable[tuple[str, set[str]]], pairs: Sequence[tuple[str, str]]) -> dict:
    """Per split and pair ``"A:B"``, from ``(split, shapes of the image)`` items: ``images_with``/``images_without``
    (images with / without an A), ``with_both`` and ``rate`` = P(B in image | A in image), ``b_without`` and
    ``rate_without`` = P(B in image | no A)."""
    counts: dict[str, dict[str, list[int]]] = {}
    for split, shapes in images:
        per_pair = counts.setdefault(split, {f"{a}:{b}": [0, 0, 0, 0] for a, b in pairs})
        for a, b in pairs:
            cell = per_pair[f"{a}:{b}"]
            offset = 0 if a in shapes else 2
            cell[offset] += 1
            cell[offset + 1] += b in shapes
    return {split: {name: {"images_with": n_with, "with_both": both, "rate": share(both, n_with),
                           "images_without": n_without, "b_without": b_alone,
                           "rate_without": share(b_alone, n_without)}
                    for name, (n_with, both, n_without, b_alone) in per_pair.items()}
            for split, per_pair in counts.items()}
