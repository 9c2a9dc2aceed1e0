"""What the torchvision extractors share: importing torchvision with a clear error, named weights, ImageNet input."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable, Sequence

import numpy as np
import torch

from vlattn.errors import ConfigError
from vlattn.pixels.images import LoadedImage

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def torchvision() -> ModuleType:
    """The torchvision module, or a one-line error saying how to install it."""
    try:
        import torchvision as module
    except ImportError as err:
        raise ConfigError(f"the grid and regions extractors need torchvision (pip install 'vlattn[pixels]'): {err}") \
            from None
    return module


def named_weights(arch: str) -> Callable[[str], Any]:
    """``name -> torchvision weights enum member`` of architecture ``arch`` (``DEFAULT`` included)."""
    enum = torchvision().models.get_model_weights(arch)
    return lambda name: getattr(enum, name)


def library_versions() -> dict[str, str]:
    """torch's and torchvision's versions (part of a record: the same weights may compute differently)."""
    return {"torch": torch.__version__, "torchvision": torchvision().__version__}


def image_tensors(images: Sequence[LoadedImage], device: torch.device) -> list[torch.Tensor]:
    """Each image as a float (3, H, W) tensor in [0, 1] on ``device``."""
    return [torch.from_numpy(np.ascontiguousarray(image.pixels.transpose(2, 0, 1))).to(device).float().div_(255)
            for image in images]


def cell_boxes(width: int, height: int, k: int) -> np.ndarray:
    """The k x k cells tiling a width x height image, row by row: (k * k, 4) float32 x1y1x2y2 pixels."""
    xs = np.linspace(0, width, k + 1, dtype=np.float32)
    ys = np.linspace(0, height, k + 1, dtype=np.float32)
    return np.array([[xs[c], ys[r], xs[c + 1], ys[r + 1]] for r in range(k) for c in range(k)], dtype=np.float32)
