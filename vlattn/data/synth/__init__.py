"""The embedded synthetic captioning + VQA data set (see :func:`generate`).

Scenes of 1-5 coloured shapes are rendered with Pillow, described by five reference captions from a
randomised grammar, asked about in VQA questions, "detected" as jittered boxes plus background boxes,
and embedded by a small CNN trained on the training split — all written in the formats real data
come in (Karpathy split, COCO captions, VQA v2, the project's memmap feature store).
"""

from .confound import Confound
from .generate import generate

__all__ = ["Confound", "generate"]
