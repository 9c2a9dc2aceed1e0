"""The public Python API, exported from ``vlattn`` (``vlattn.presets()``, ``vlattn.load_config(...)``,
``vlattn.create_model(...)``, ``vlattn.load(...)``); the top layer beside the CLI.

Every config goes through the same validation as a YAML file the CLI reads (:mod:`vlattn.validation`): a bad value,
unknown key or a component its registry refuses is a one-line :class:`~vlattn.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from vlattn.config import Config, apply_overrides, config_to_dict, named_keys
from vlattn.errors import ConfigError
from vlattn.shipped_presets import describe
from vlattn.tasks import Answerer, Captioner, load_predictor, task_of
from vlattn.validation import load_valid_config, valid_config

Overrides = Sequence[str] | Mapping[str, Any] | None


def presets() -> dict[str, str]:
    """The shipped presets: name -> one-line description (``vlattn config list``)."""
    return describe()


def _items(overrides: Overrides) -> list[str]:
    """``section.key=value`` items of ``overrides``: such items, or a mapping of dotted keys to Python values
    (written as JSON, which the YAML reading of an item parses back to the same value)."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    if isinstance(overrides, str):
        raise ConfigError(f"overrides: expected a list of section.key=value items or a mapping, got {overrides!r}")
    return list(overrides)


def load_config(name_or_path: str | Path | None = None, overrides: Overrides = None) -> Config:
    """The validated config of a preset name (``"m2"``, see :func:`presets`) or a YAML/JSON file, with
    ``overrides``: ``["train.epochs=3", ...]`` as ``--set`` takes them, or ``{"train.epochs": 3, ...}``."""
    return load_valid_config(name_or_path, _items(overrides))


def create_model(
    preset_or_config: str | Path | Config, *, vocab_size: int, num_answers: int | None = None,
    overrides: Overrides = None, **model_keys: Any,
) -> nn.Module:
    """A new, randomly initialised model ready to train (as timm's ``create_model``): the model of a preset, a
    config file or a :class:`Config`, over ``vocab_size`` words (the 4 special tokens included) and, for VQA,
    ``num_answers`` candidate answers. ``model_keys`` set keys of the model section (``d_model=256``,
    ``dropout=0.2``), ``overrides`` any key (as :func:`load_config`); both are validated as YAML is."""
    items = [*_items(overrides), *_items({f"model.{key}": value for key, value in model_keys.items()})]
    if isinstance(preset_or_config, Config):
        # a Config object: validated again as a whole, with its components, as a loaded config is
        cfg = valid_config(apply_overrides(config_to_dict(preset_or_config), items), named_keys(None, items))
    else:
        cfg = load_config(preset_or_config, items)
    return task_of(cfg.task).create_model(cfg, vocab_size=vocab_size, num_answers=num_answers)


def load(run_dir_or_checkpoint: str | Path, device: str = "auto") -> Captioner | Answerer:
    """A trained model (as Hugging Face's ``from_pretrained``): a run directory (its best checkpoint) or a
    checkpoint directory, on ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``auto``). A captioning run gives a
    :class:`Captioner` (``.caption(...)``), a VQA run an :class:`Answerer` (``.answer(...)``); each carries its
    vocabularies, special token ids and decoding defaults."""
    return load_predictor(run_dir_or_checkpoint, device)
