"""Simulated detector output: every object's box with a small jitter plus 0-2 background boxes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .scene import Scene

JITTER = 0.06  # std of each box coordinate's shift, as a fraction of the object's side
MAX_DISTRACTORS = 2
DISTRACTOR_SIDE = (0.12, 0.3)  # side of a background box, as a fraction of the image side
DISTRACTOR_TRIES = 30


@dataclass(frozen=True)
class Detections:
    """Regions of one image in detector order: ``boxes`` (N, 4) float32 x1y1x2y2 pixels and,
    per region, the index of the scene object it covers (-1 for a background box)."""

    boxes: np.ndarray
    objects: tuple[int, ...]

    def to_json(self) -> list[dict]:
        return [
            {"box": [round(float(v), 2) for v in box], "object": obj if obj >= 0 else None}
            for box, obj in zip(self.boxes, self.objects)
        ]


def _overlaps_any(box: np.ndarray, scene: Scene) -> bool:
    return any(
        box[0] < o.box[2] and o.box[0] < box[2] and box[1] < o.box[3] and o.box[1] < box[3] for o in scene.objects
    )


def detect(scene: Scene, rng: np.random.Generator, missed: frozenset[int] = frozenset()) -> Detections:
    """Jittered object boxes (but none for the objects ``missed``) and background boxes that overlap no object, in
    a random order."""
    size = scene.image_size
    boxes: list[np.ndarray] = []
    for obj in scene.objects:  # every object draws its jitter, so a miss changes no other box
        box = np.array(obj.box, dtype=np.float64)
        side = box[2] - box[0]
        box = np.clip(box + rng.normal(0.0, JITTER * side, size=4), 0, size)
        boxes.append(np.array([box[0], box[1], max(box[2], box[0] + 2), max(box[3], box[1] + 2)]))
    objects = [k for k in range(len(scene.objects)) if k not in missed]
    boxes = [boxes[k] for k in objects]
    for _ in range(int(rng.integers(MAX_DISTRACTORS + 1))):
        for _ in range(DISTRACTOR_TRIES):
            side = rng.uniform(*DISTRACTOR_SIDE) * size
            x1, y1 = rng.uniform(0, size - side, size=2)
            box = np.array([x1, y1, x1 + side, y1 + side])
            if not _overlaps_any(box, scene):
                boxes.append(box)
                objects.append(-1)
                break
    order = rng.permutation(len(boxes))
    return Detections(np.stack(boxes)[order].astype(np.float32), tuple(objects[i] for i in order))
