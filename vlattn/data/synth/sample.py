"""One synthetic image with everything derived from it: scene, pixels, detections, captions, questions.

Each image draws from its own random streams, seeded by (seed, stream, image id), so an image does
not depend on how many others are generated, and each part (layout, pixels, captions ...) can change
its draws without disturbing the others.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .confound import AttributeSampler, Confound
from .cooccur import impose_cooccurrence
from .detections import Detections, detect
from .evidence import choose_missed, mark_ambiguous
from .grammar import captions
from .render import render_scene
from .scene import Scene, sample_scene
from .vqa_gen import Question, annotator_answers, questions

STREAMS = ("scene", "render", "detect", "caption", "vqa", "confound")


@dataclass(frozen=True)
class Sample:
    """``pixels`` (S, S, 3) uint8; ``answers[q]`` are the ten annotator answers of ``questions[q]``."""

    scene: Scene
    pixels: np.ndarray
    detections: Detections
    captions: list[str]
    questions: list[Question]
    answers: list[list[str]]


def confounded_scene(scene: Scene, confound: Confound, attributes: AttributeSampler,
                     rng: np.random.Generator) -> tuple[Scene, frozenset[int]]:
    """``scene`` with the confound's object co-occurrence (train only) and ambiguous objects, and the indices of
    the objects the detector misses; every draw from ``rng`` (the image's own "confound" stream)."""
    objects = list(scene.objects)
    if scene.split == "train":
        for pair in confound.cooccur:
            objects = impose_cooccurrence(objects, pair, confound.cooccur_p, rng, attributes, scene.image_size)
    if confound.ambiguous:
        objects = mark_ambiguous(objects, confound.ambiguous, rng)
    missed = choose_missed(objects, frozenset(b for _, b in confound.cooccur), confound.missed, rng)
    return replace(scene, objects=tuple(objects)), missed


def make_sample(
    image_id: int, split: str, *, seed: int, image_size: int, attributes: AttributeSampler, answer_noise: float,
    confound: Confound | None = None,
) -> Sample:
    """Generate image ``image_id`` of ``split`` deterministically from ``seed``; ``attributes`` draws colours and
    sizes, ``confound`` (if any) adds its object co-occurrence and weak evidence (:func:`confounded_scene`)."""
    rng = {name: np.random.default_rng([seed, k, image_id]) for k, name in enumerate(STREAMS)}
    scene = sample_scene(rng["scene"], image_id, split, image_size, attributes)
    missed: frozenset[int] = frozenset()
    if confound is not None:
        scene, missed = confounded_scene(scene, confound, attributes, rng["confound"])
    asked = questions(scene, rng["vqa"])
    return Sample(
        scene=scene,
        pixels=render_scene(scene, rng["render"], confound.contrast if confound is not None else 0.0),
        detections=detect(scene, rng["detect"], missed),
        captions=captions(scene, rng["caption"]),
        questions=asked,
        answers=[annotator_answers(q, rng["vqa"], answer_noise) for q in asked],
    )
