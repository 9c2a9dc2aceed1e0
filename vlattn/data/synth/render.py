"""Draw a :class:`Scene` into an RGB image with Pillow on a lightly noisy grey background."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from PIL import Image, ImageDraw

from .evidence import shadow_fill
from .lexicon import COLOURS
from .scene import Scene

BACKGROUND = 120  # mean grey level; every colour, black and white included, stands out against it
BACKGROUND_SPREAD = 12  # per-image shift of the grey level
NOISE_STD = 6.0  # per-pixel noise
COLOUR_JITTER = 14  # per-object, per-channel shift of the colour

Points = list[tuple[float, float]]


def _star(x1: float, y1: float, x2: float, y2: float) -> Points:
    cx, cy, r = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2
    radii = [r if k % 2 == 0 else 0.45 * r for k in range(10)]
    return [(cx + rk * math.sin(k * math.pi / 5), cy - rk * math.cos(k * math.pi / 5)) for k, rk in enumerate(radii)]


def _cross(x1: float, y1: float, x2: float, y2: float) -> Points:
    a, b = x1 + (x2 - x1) / 3, x1 + 2 * (x2 - x1) / 3
    c, d = y1 + (y2 - y1) / 3, y1 + 2 * (y2 - y1) / 3
    return [(a, y1), (b, y1), (b, c), (x2, c), (x2, d), (b, d), (b, y2), (a, y2), (a, d), (x1, d), (x1, c), (a, c)]


# Outline of each shape inside its box (x1, y1, x2, y2); circles are drawn as ellipses.
OUTLINES: dict[str, Callable[[float, float, float, float], Points]] = {
    "square": lambda x1, y1, x2, y2: [(x1, y1), (x2, y1), (x2, y2), (x1, y2)],
    "triangle": lambda x1, y1, x2, y2: [((x1 + x2) / 2, y1), (x2, y2), (x1, y2)],
    "diamond": lambda x1, y1, x2, y2: [
        ((x1 + x2) / 2, y1), (x2, (y1 + y2) / 2), ((x1 + x2) / 2, y2), (x1, (y1 + y2) / 2)
    ],
    "star": _star,
    "cross": _cross,
}


def render_scene(scene: Scene, rng: np.random.Generator, contrast: float = 0.0) -> np.ndarray:
    """The scene as a uint8 array (S, S, 3); ``rng`` draws the background and colour jitter. Ambiguous objects are
    drawn in shadow at ``contrast`` (:func:`.evidence.shadow_fill`)."""
    size = scene.image_size
    grey = BACKGROUND + rng.uniform(-BACKGROUND_SPREAD, BACKGROUND_SPREAD)
    noise = rng.normal(grey, NOISE_STD, size=(size, size, 3))
    image = Image.fromarray(np.clip(noise, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)
    for obj in scene.objects:
        jitter = rng.integers(-COLOUR_JITTER, COLOUR_JITTER + 1, size=3)
        colour = shadow_fill(COLOURS[obj.colour], contrast) if obj.ambiguous else np.array(COLOURS[obj.colour])
        fill = tuple(int(v) for v in np.clip(np.rint(colour) + jitter, 0, 255))
        x1, y1, x2, y2 = obj.box
        box = (x1, y1, x2 - 1, y2 - 1)  # Pillow's boxes include their last pixel
        if obj.shape == "circle":
            draw.ellipse(box, fill=fill)
        else:
            draw.polygon(OUTLINES[obj.shape](*box), fill=fill)
    return np.asarray(image)
