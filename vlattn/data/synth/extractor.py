"""The region-feature extractor: a small CNN trained on training-split crops, then used per box.

The analogue of bottom-up features pretrained on Visual Genome attributes: a CNN learns to tell the
shape (or background), colour and size of the object in a crop, and its penultimate layer — a
D-dimensional vector from which the three linear heads read those labels — is the region feature.

A crop is a fixed-size window (``WINDOW_FRACTION`` of the image side) centred on the box, so the
object's apparent size is kept (size is learnable); it is resized to ``PATCH`` pixels for the CNN.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from vlattn.errors import DataError, WriteError

from .lexicon import COLOURS, SHAPES, SIZES

PATCH = 32
WINDOW_FRACTION = 0.4
IGNORE = -1  # label of colour/size for background crops
HEADS: dict[str, int] = {"shape": len(SHAPES) + 1, "colour": len(COLOURS), "size": len(SIZES)}  # shape: + background
BACKGROUND = len(SHAPES)
BATCH_SIZE = 64
MIN_EPOCHS = 3
MIN_STEPS = 250


@dataclass(frozen=True)
class Crops:
    """Windows around boxes, ``pixels`` (M, 3, W, W) uint8, and their labels ``labels[name]`` (M,) int64
    for each of :data:`HEADS` (shape index or ``BACKGROUND``; colour/size index or ``IGNORE``)."""

    pixels: np.ndarray
    labels: dict[str, np.ndarray]


def window_crops(image: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Square windows centred on ``boxes`` (N, 4) from ``image`` (S, S, 3) -> (N, 3, W, W) uint8.

    The image is edge-padded so windows near the border keep their size.
    """
    window = max(8, int(round(WINDOW_FRACTION * image.shape[0])))
    half = window // 2
    padded = np.pad(image, ((half, half), (half, half), (0, 0)), mode="edge")
    centres = np.rint((boxes[:, :2] + boxes[:, 2:]) / 2).astype(int)  # (N, 2) x, y
    crops = [padded[cy : cy + window, cx : cx + window] for cx, cy in centres]
    return np.stack(crops).transpose(0, 3, 1, 2).copy()


def _conv(c_in: int, c_out: int) -> nn.Sequential:
    conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
    return nn.Sequential(conv, nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2))


class RegionCNN(nn.Module):
    """Crops (B, 3, PATCH, PATCH) in [0, 1] -> features (B, D); ``heads`` reads labels from features."""

    def __init__(self, feature_dim: int, width: int = 16) -> None:
        super().__init__()
        self.body = nn.Sequential(
            _conv(3, width), _conv(width, 2 * width), _conv(2 * width, 4 * width), nn.Flatten(),
            nn.Linear(4 * width * (PATCH // 8) ** 2, feature_dim), nn.ReLU(),
        )
        self.heads = nn.ModuleDict({name: nn.Linear(feature_dim, n) for name, n in HEADS.items()})

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.body(pixels)

    def loss(self, features: torch.Tensor, labels: dict[str, torch.Tensor]) -> torch.Tensor:
        """Sum of the heads' cross-entropies; background crops only count for the shape head."""
        return sum(F.cross_entropy(self.heads[name](features), labels[name], ignore_index=IGNORE) for name in HEADS)


def _prepare(pixels: np.ndarray) -> torch.Tensor:
    """uint8 (B, 3, W, W) -> float (B, 3, PATCH, PATCH) in [0, 1]."""
    x = torch.from_numpy(pixels).float().div_(255.0)
    return x if x.shape[-1] == PATCH else F.interpolate(x, size=(PATCH, PATCH), mode="bilinear", align_corners=False)


def default_epochs(num_crops: int, batch_size: int = BATCH_SIZE) -> int:
    """At least ``MIN_EPOCHS`` epochs and ``MIN_STEPS`` optimiser steps (small data sets need more epochs)."""
    steps_per_epoch = max(1, -(-num_crops // batch_size))
    return max(MIN_EPOCHS, -(-MIN_STEPS // steps_per_epoch))


def train_extractor(
    crops: Crops, feature_dim: int, *, epochs: int, seed: int, batch_size: int = BATCH_SIZE, lr: float = 3e-3
) -> RegionCNN:
    """Train a :class:`RegionCNN` on ``crops`` with Adam; deterministic given ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = RegionCNN(feature_dim)
    order = torch.Generator().manual_seed(seed)
    labels = {name: torch.from_numpy(values) for name, values in crops.labels.items()}
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    steps = epochs * -(-len(crops.pixels) // batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=max(steps, 1))
    model.train()
    for _ in range(epochs):
        permutation = torch.randperm(len(crops.pixels), generator=order)
        for start in range(0, len(permutation), batch_size):
            index = permutation[start : start + batch_size]
            features = model(_prepare(crops.pixels[index.numpy()]))
            loss = model.loss(features, {name: values[index] for name, values in labels.items()})
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    return model.eval()


@torch.no_grad()
def extract(model: RegionCNN, pixels: np.ndarray, batch_size: int = 512) -> np.ndarray:
    """Features (M, D) float32 of crops ``pixels`` (M, 3, W, W) uint8, computed on the model's device."""
    model.eval()
    device = next(model.parameters()).device
    chunks = [model(_prepare(pixels[i : i + batch_size]).to(device)).cpu() for i in range(0, len(pixels), batch_size)]
    return torch.cat(chunks).numpy() if chunks else np.zeros((0, model.heads["shape"].in_features), np.float32)


@torch.no_grad()
def head_accuracy(model: RegionCNN, features: np.ndarray, labels: dict[str, np.ndarray]) -> dict[str, float | None]:
    """Accuracy of each head on ``features`` (M, D), over the crops that have that label."""
    result: dict[str, float | None] = {}
    x = torch.from_numpy(features)
    for name in HEADS:
        valid = labels[name] != IGNORE
        predicted = model.heads[name](x[torch.from_numpy(valid)]).argmax(-1).numpy()
        result[name] = float((predicted == labels[name][valid]).mean()) if valid.any() else None
    return result


WEIGHTS_FILE = "extractor.safetensors"  # the trained RegionCNN in a generated data set
_SIZES = "vlattn.synth_extractor"  # its metadata: JSON {feature_dim, image_size}


def save_extractor(model: RegionCNN, path: Path, image_size: int) -> None:
    """Write ``model``'s weights to ``path`` (safetensors) with the feature dimension and the image size it reads
    in the file's metadata."""
    # one metadata key: safetensors writes a metadata map in no fixed order, and the data set must be byte-identical
    # for a given seed
    sizes = json.dumps({"feature_dim": model.heads["shape"].in_features, "image_size": image_size}, sort_keys=True)
    try:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path), metadata={_SIZES: sizes})
    except SafetensorError as err:  # the writer's I/O errors (disk full, file too large) come as this type
        raise WriteError(path, err) from None


def load_extractor(path: Path) -> tuple[RegionCNN, int]:
    """The :class:`RegionCNN` saved at ``path`` (in eval mode) and the image size it reads."""
    try:
        with safe_open(str(path), framework="pt") as handle:
            sizes = json.loads((handle.metadata() or {})[_SIZES])
            state = {name: handle.get_tensor(name) for name in handle.keys()}
        model = RegionCNN(int(sizes["feature_dim"]))
        model.load_state_dict(state)
        return model.eval(), int(sizes["image_size"])
    except (KeyError, ValueError, TypeError) as err:
        raise DataError(f"not a synthetic-set extractor ({WEIGHTS_FILE}): {err}", path=path) from None
    except (SafetensorError, OSError, RuntimeError) as err:
        raise DataError(f"cannot read the extractor weights: {' '.join(str(err).split())}", path=path) from None
