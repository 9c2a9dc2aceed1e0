"""What a model's weights take in memory, checked against what the machine has before any weight exists.

A config is validated by building its model on the meta device (:func:`vlattn.models.check_model_config`):
the structure with every tensor's shape and dtype, no data. The bytes of its parameters and buffers are
therefore known exactly before anything is allocated; a config whose weights alone exceed the memory available
is refused then, as a one-line ``ConfigError`` naming the config key that makes the model large, instead of
an allocation failure (or the kernel's out-of-memory killer) once training starts.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from torch import nn

from vlattn.config import ModelConfig
from vlattn.errors import ConfigError

GIB = 1 << 30


def model_bytes(model: nn.Module) -> int:
    """Bytes of the parameters and buffers of ``model`` (a model on the meta device included)."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux ``MemAvailable``; else free physical pages), or
    None where the system does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def largest_size_key(cfg: ModelConfig) -> str:
    """``model.KEY=VALUE`` for the integer size of ``cfg`` furthest above its default (by ratio): the key to
    name when the model is too large."""
    defaults = ModelConfig()
    ratios = {}
    for field in dataclasses.fields(ModelConfig):
        value, default = getattr(cfg, field.name), getattr(defaults, field.name)
        if isinstance(value, int) and not isinstance(value, bool) and isinstance(default, int) and default > 0:
            ratios[field.name] = value / default
    key = max(ratios, key=ratios.__getitem__)
    return f"model.{key}={getattr(cfg, key)}"


def check_footprint(model: nn.Module, cfg: ModelConfig, available: int | None = None) -> None:
    """Refuse ``model`` (built from ``cfg``, usually on the meta device) when its parameters and buffers need
    more bytes than ``available`` (default: :func:`available_memory`)."""
    available = available_memory() if available is None else available
    needed = model_bytes(model)
    if available is None or needed <= available:
        return
    name, tensor = max([*model.named_parameters(), *model.named_buffers()], key=lambda item: item[1].numel())
    raise ConfigError(
        f"{largest_size_key(cfg)}: the model's weights need {needed / GIB:.1f} GiB, more than the "
        f"{available / GIB:.1f} GiB of memory available (largest tensor: {name} {tuple(tensor.shape)})")
