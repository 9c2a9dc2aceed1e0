"""Dataclass configs with YAML in and out; unknown keys are rejected with the key named.

Modules never receive a whole config: builders read the fields they need and pass explicit
arguments. ``load_config(path, overrides)`` reads a YAML preset from ``configs/`` and applies
``--set section.key=value`` overrides.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vlattn.errors import ConfigError


@dataclass
class AttentionSpec:
    """Which registered attention mechanism a site uses, with its mechanism-specific options."""

    name: str = "mha"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelConfig:
    """Captioner architecture. ``kind`` selects a builder in ``vlattn.models.MODELS``."""

    kind: str = "transformer"
    feature_dim: int = 2048
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    encoder_layers: int = 3
    decoder_layers: int = 3
    dropout: float = 0.1
    max_positions: int = 64
    tie_embeddings: bool = False
    output_bias: bool = True
    box_input: bool = False
    encoder_self_attention: AttentionSpec = field(default_factory=AttentionSpec)
    decoder_self_attention: AttentionSpec = field(default_factory=AttentionSpec)
    decoder_cross_attention: AttentionSpec = field(default_factory=AttentionSpec)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class DataConfig:
    """Where the data lives and how captions/regions are cut."""

    root: str = "data/synth"
    karpathy: str = "dataset.json"
    features: str = "features"
    vocab_min_count: int = 5
    vocab_splits: list[str] = field(default_factory=lambda: ["train"])
    max_regions: int = 50
    max_caption_len: int = 20
    num_workers: int = 0


@dataclass
class ScheduleConfig:
    """Learning-rate schedule. ``name`` in ``vlattn.training.schedules.SCHEDULES``."""

    name: str = "noam"
    lr: float = 1.0
    warmup: int = 10000
    base_lr: float = 1e-4
    max_lr: float = 3e-4
    decay_start_epoch: int = 6
    decay_every: int = 3
    decay_factor: float = 0.5


@dataclass
class TrainConfig:
    """Optimisation, validation and logging for the XE and SCST stages."""

    seed: int = 1234
    epochs: int = 20
    batch_size: int = 50
    label_smoothing: float = 0.0
    grad_clip: float = 0.0
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    weight_decay: float = 0.0
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    val_decoding: str = "greedy"
    val_max_images: int = 0
    max_steps: int = 0
    log_every: int = 50
    checkpoint_every: int = 0
    # SCST stage (M2 section 4.2: fixed learning rate 5e-6; "step"/"noam" select the paper schedules)
    scst_schedule: ScheduleConfig = field(default_factory=lambda: ScheduleConfig(name="constant", lr=5e-6))
    scst_epochs: int = 10
    scst_samples: int = 5
    scst_sampling: str = "beam"
    scst_baseline: str = "mean"
    scst_batch_size: int = 50


@dataclass
class EvalConfig:
    """Decoding and scoring options on which the anchor implementations differ."""

    beam_size: int = 5
    max_len: int = 20
    length_penalty: float = 0.0
    collapse_repeats: bool = False
    batch_size: int = 50
    cider_df_mode: str = "image"
    reward_include_eos: bool = False


@dataclass
class Config:
    """The whole run: model, data, training, evaluation."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def _build(cls: type, data: Any, where: str) -> Any:
    """Instantiate dataclass ``cls`` from a mapping, rejecting unknown keys (named with their path)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"unknown config key {where + '.' if where else ''}{unknown[0]!s}; valid keys: {', '.join(sorted(names))}"
        )
    kwargs = {}
    for key, value in data.items():
        hint = hints[key]
        path = f"{where}.{key}" if where else key
        kwargs[key] = _build(hint, value, path) if dataclasses.is_dataclass(hint) else _coerce(hint, value, path)
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    """Check/convert a leaf value against its type hint (int/float/bool/str/list/dict)."""
    origin = typing.get_origin(hint) or hint
    if origin is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if origin is float and isinstance(value, str):
        try:  # YAML 1.1 reads "5e-6" (no dot) as a string
            return float(value)
        except ValueError:
            pass
    if origin is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if origin in (bool, str) and isinstance(value, origin):
        return value
    if origin is list and isinstance(value, list):
        return list(value)
    if origin is dict and isinstance(value, dict):
        return dict(value)
    if hint is Any:
        return value
    raise ConfigError(f"config key {where}: expected {getattr(hint, '__name__', hint)}, got {value!r}")


def config_from_dict(data: dict[str, Any]) -> Config:
    """Build a :class:`Config` from nested dicts (YAML or JSON), rejecting unknown keys."""
    return _build(Config, data, "")


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """Nested plain dicts, suitable for YAML/JSON."""
    return dataclasses.asdict(cfg)


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"override {item!r}: expected key=value, e.g. train.epochs=3")
    key, raw = item.split("=", 1)
    return key.strip().split("."), yaml.safe_load(raw)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to nested dicts in place."""
    for item in overrides:
        keys, value = _parse_override(item)
        node = data
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {key} is not a section")
        node[keys[-1]] = value
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read a YAML (or JSON) config file, apply overrides, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found")
        try:
            text = path.read_text()
            data = (json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)) or {}
        except (yaml.YAMLError, json.JSONDecodeError) as err:
            raise ConfigError(f"{path}: not valid YAML: {err}") from None
    apply_overrides(data, overrides or [])
    try:
        return config_from_dict(data)
    except ConfigError as err:
        raise ConfigError(f"{path or 'config'}: {err}") from None


def save_config(cfg: Config, path: str | Path) -> None:
    """Write the config as JSON (``config.json`` of a checkpoint) or YAML, by suffix; atomically."""
    from vlattn.io import atomic_write_text

    data = config_to_dict(cfg)
    text = json.dumps(data, indent=2) if str(path).endswith(".json") else yaml.safe_dump(data, sort_keys=False)
    atomic_write_text(path, text)
