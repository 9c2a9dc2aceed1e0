"""Checkpoints: ``model.safetensors`` + ``config.json`` + ``vocab.json`` (+ ``train_state.pt``).

A checkpoint is a directory written as a whole: files go into ``<dir>.tmp``, which then replaces
``<dir>`` by renames (the previous version is kept as ``<dir>.old`` until the swap is complete). A
crash at any moment therefore leaves either the old or the new checkpoint readable, never a mix;
:func:`resolve_checkpoint` falls back to ``<dir>.old`` if a crash hit between the two renames.

``train_state.pt`` holds only tensors and plain Python containers (optimizer state, RNG states,
counters) and is read with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from vlattn.config import Config, config_from_dict, save_config
from vlattn.data.vocab import Vocabulary
from vlattn.errors import DataError

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.json"
STATE_FILE = "train_state.pt"


@dataclass
class Checkpoint:
    """What a checkpoint directory holds, loaded."""

    path: Path
    config: Config
    vocab: Vocabulary
    train_state: dict[str, Any] | None


def save_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    config: Config,
    vocab: Vocabulary,
    train_state: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint directory atomically (see module docstring). Returns its path."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    old = path.with_name(path.name + ".old")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_model(model, str(tmp / MODEL_FILE))
    save_config(config, tmp / CONFIG_FILE)
    vocab.save(tmp / VOCAB_FILE)
    if train_state is not None:
        torch.save(train_state, tmp / STATE_FILE)
    if old.exists():
        shutil.rmtree(old)
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    if old.exists():
        shutil.rmtree(old)
    return path


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint directory for ``path``: a checkpoint itself, or a run dir (its ``best``, else ``last``)."""
    path = Path(path)
    candidates = [path, path / "checkpoints" / "best", path / "checkpoints" / "last"]
    for candidate in candidates:
        for variant in (candidate, candidate.with_name(candidate.name + ".old")):
            if (variant / MODEL_FILE).is_file() and (variant / CONFIG_FILE).is_file():
                return variant
    raise DataError("no checkpoint found (expected model.safetensors + config.json, or a run dir)", path=path)


def load_checkpoint(path: str | Path, *, with_state: bool = False) -> Checkpoint:
    """Read config, vocabulary and (optionally) training state; the model is loaded by :func:`load_weights`."""
    directory = resolve_checkpoint(path)
    try:
        config = config_from_dict(json.loads((directory / CONFIG_FILE).read_text()))
    except json.JSONDecodeError as err:
        raise DataError(f"malformed JSON: {err}", path=directory / CONFIG_FILE) from None
    vocab = Vocabulary.load(directory / VOCAB_FILE)
    state = None
    if with_state and (directory / STATE_FILE).is_file():
        state = torch.load(directory / STATE_FILE, map_location="cpu", weights_only=True)
    return Checkpoint(directory, config, vocab, state)


def load_weights(model: torch.nn.Module, checkpoint: Checkpoint | str | Path) -> torch.nn.Module:
    """Load ``model.safetensors`` into ``model`` (strict), naming the file on mismatch."""
    directory = checkpoint.path if isinstance(checkpoint, Checkpoint) else resolve_checkpoint(checkpoint)
    file = directory / MODEL_FILE
    try:
        missing, unexpected = load_model(model, str(file), strict=False)
    except Exception as err:  # safetensors raises several types for corrupt files and shape mismatches
        raise DataError(f"cannot load weights: {err}", path=file) from None
    if missing or unexpected:
        raise DataError(f"weights do not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}", path=file)
    return model
