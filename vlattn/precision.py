"""Mixed precision and compilation for training and decoding (GPU users; both work on the CPU too).

``precision`` (config ``train.precision`` / ``eval.precision``): ``fp32`` (default, no autocast), ``bf16`` or
``fp16``: the forward pass (and decoding) runs under ``torch.autocast`` with that dtype; parameters, optimizer
state and the loss's backward stay in float32. ``fp16`` training scales the loss with a ``GradScaler`` (its
state is part of a checkpoint's training state); ``bf16`` needs none.

``compile`` (``train.compile`` / ``eval.compile``): every layer of the model's ``backbone_layers()`` is compiled
in place with ``torch.compile(dynamic=True)`` (``nn.Module.compile``: parameter names and checkpoints are
unchanged; decoding's growing prefix does not recompile per length). The first steps pay the compilation.
"""

from __future__ import annotations

import contextlib
from typing import Literal

import torch
from torch import nn

from vlattn.errors import ConfigError

Precision = Literal["fp32", "bf16", "fp16"]
DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision: Precision, device: torch.device) -> contextlib.AbstractContextManager:
    """The autocast context of ``precision`` on ``device`` (a no-op for ``fp32``)."""
    dtype = DTYPES[precision]
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def grad_scaler(precision: Precision, device: torch.device) -> torch.amp.GradScaler:
    """A loss scaler, enabled for ``fp16`` only (a disabled scaler passes the loss and the step through)."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def compile_layers(model: nn.Module, backend: str = "inductor") -> nn.Module:
    """Compile each of ``model.backbone_layers()`` in place (dynamic shapes) with ``backend``; returns ``model``.
    A model without them (Up-Down's LSTM cells) is a ``ConfigError``."""
    if not hasattr(model, "backbone_layers"):
        raise ConfigError(f"compile: {type(model).__name__} has no layer stack to compile")
    for layer in model.backbone_layers():
        layer.compile(dynamic=True, backend=backend)
    return model
