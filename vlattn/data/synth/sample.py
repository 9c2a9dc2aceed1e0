"""One synthetic image with everything derived from it: scene, pixels, detections, captions, questions.

Each image draws from its own random streams, seeded by (seed, stream, image id), so an image does
not depend on how many others are generated, and each part (layout, pixels, captions ...) can change
its draws without disturbing the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .confound import AttributeSampler
from .detections import Detections, detect
from .grammar import captions
from .render import render_scene
from .scene import Scene, sample_scene
from .vqa_gen import Question, annotator_answers, questions

STREAMS = ("scene", "render", "detect", "caption", "vqa")


@dataclass(frozen=True)
class Sample:
    """``pixels`` (S, S, 3) uint8; ``answers[q]`` are the ten annotator answers of ``questions[q]``."""

    scene: Scene
    pixels: np.ndarray
    detections: Detections
    captions: list[str]
    questions: list[Question]
    answers: list[list[str]]


def make_sample(
    image_id: int, split: str, *, seed: int, image_size: int, attributes: AttributeSampler, answer_noise: float
) -> Sample:
    """Generate image ``image_id`` of ``split`` deterministically from ``seed``."""
    rng = {name: np.random.default_rng([seed, k, image_id]) for k, name in enumerate(STREAMS)}
    scene = sample_scene(rng["scene"], image_id, split, image_size, attributes)
    asked = questions(scene, rng["vqa"])
    return Sample(
        scene=scene,
        pixels=render_scene(scene, rng["render"]),
        detections=detect(scene, rng["detect"]),
        captions=captions(scene, rng["caption"]),
        questions=asked,
        answers=[annotator_answers(q, rng["vqa"], answer_noise) for q in asked],
    )
