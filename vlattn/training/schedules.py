"""Learning-rate schedules of the papers, as pure functions of (step, epoch).

A schedule is stateless: the trainer asks ``lr_at(step, epoch)`` before every optimiser step, so a
resumed run reproduces the schedule exactly from the saved step/epoch counters.

* ``noam`` — "Attention is all you need" schedule used by M2 (section 4.2, warm-up 10000):
  ``lr = scale * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5)`` with ``s = step + 1``; with
  ``epoch_offset`` ``s = step + epoch + 2``, the released M2 ``train.py``, whose ``LambdaLR`` is stepped once
  more at the start of every epoch (and whose lambda adds one to the count it is given).
* ``step`` — NG-SAN section 5.1: the base rate is ``min(t * 1e-4, 3e-4)`` with ``t`` the epoch
  number starting at 1; "after 6 epochs, the learning rate is decayed by 1/2 every 3 epochs".
  We read this literally: epochs 7-9 use half the rate, 10-12 a quarter, and so on
  (``factor ** ((t - 7) // 3 + 1)`` for ``t >= 7``).
* ``constant`` — a fixed rate (SCST, M2: 5e-6).
* ``warmup_multistep`` — LW-Transformer Sec. IV-C (the OpenVQA/MCAN schedule): ``base_lr * t / (w + 1)`` in
  epochs t = 1..w of warm-up (w = 3: 1/4, 2/4, 3/4 of the rate, as the released code), then ``base_lr``,
  multiplied by ``decay_factor`` after each epoch listed in ``decay_epochs`` (0.2 after 10 and after 12).

* ``warmup_linear`` — BERT's ``warmup_linear`` as the released LXMERT fine-tuning uses it (``BertAdam(warmup=0.1,
  t_total=T)``): with x = (step + 1) / T, ``lr * x / warmup`` while x < warmup, then ``lr * (1 - x) / (1 - warmup)``
  (0 from the last step on); T, the run's optimiser steps (epochs x steps per epoch), is known when the run starts
  (``total_steps`` None) or given.

``train.lr_scaling: sqrt_groups`` multiplies the XE schedule by sqrt(k) (:func:`lr_scale`; LW-Transformer
Sec. IV-C: "the basic learning rate is set to 1e-4 x sqrt(k), where k denotes the number of groups"); the SCST
rate is given outright (5e-6) and not scaled.

Each schedule is a frozen dataclass whose fields are its options, so a config carries only the keys of the
schedule it names: ``schedule: {name: noam, options: {warmup: 10000, scale: 1.0}}``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Protocol

from torch import nn

from vlattn.config import MAX_WIDTH, Spec, bounded, lookup, parse_options
from vlattn.errors import ConfigError
from vlattn.layers.grouped import GroupedLinear


class Schedule(Protocol):
    """Maps the 0-based optimiser step and 0-based epoch to a learning rate."""

    def lr_at(self, step: int, epoch: int) -> float: ...


@dataclass(frozen=True)
class Noam:
    """Warm-up then inverse square-root decay, scaled by ``d_model^-0.5`` (``d_model`` defaults to the
    model's width when the schedule is built from a config)."""

    warmup: int = bounded(10000, ge=1)
    scale: float = bounded(1.0, gt=0.0)
    d_model: int | None = bounded(None, ge=1, le=MAX_WIDTH)
    epoch_offset: bool = False

    def lr_at(self, step: int, epoch: int) -> float:
        s = step + 1 + (epoch + 1 if self.epoch_offset else 0)
        return self.scale * self.d_model**-0.5 * min(s**-0.5, s * self.warmup**-1.5)


@dataclass(frozen=True)
class StepDecay:
    """NG-SAN: linear epoch warm-up to ``max_lr`` then multiplying by ``decay_factor`` every ``decay_every``
    epochs after ``decay_start_epoch``."""

    base_lr: float = bounded(1e-4, gt=0.0)
    max_lr: float = bounded(3e-4, gt=0.0)
    decay_start_epoch: int = bounded(6, ge=0)
    decay_every: int = bounded(3, ge=1)
    decay_factor: float = bounded(0.5, gt=0.0, le=1.0)

    def lr_at(self, step: int, epoch: int) -> float:
        t = epoch + 1
        lr = min(t * self.base_lr, self.max_lr)
        if t > self.decay_start_epoch:
            lr *= self.decay_factor ** ((t - self.decay_start_epoch - 1) // self.decay_every + 1)
        return lr


@dataclass(frozen=True)
class Constant:
    """A fixed learning rate."""

    lr: float = bounded(1e-4, gt=0.0)

    def lr_at(self, step: int, epoch: int) -> float:
        return self.lr


@dataclass(frozen=True)
class WarmupMultiStep:
    """LW-Transformer / MCAN: linear warm-up over ``warmup_epochs`` epochs (t / (w + 1) of the rate in epoch t),
    then ``base_lr`` times ``decay_factor`` for every epoch of ``decay_epochs`` already completed."""

    base_lr: float = bounded(1e-4, gt=0.0)
    warmup_epochs: int = bounded(3, ge=0)
    decay_epochs: list[int] = bounded(factory=lambda: [10, 12], ge=1)
    decay_factor: float = bounded(0.2, gt=0.0, le=1.0)

    def lr_at(self, step: int, epoch: int) -> float:
        t = epoch + 1
        warm = min(t / (self.warmup_epochs + 1), 1.0)
        return self.base_lr * warm * self.decay_factor ** sum(t > d for d in self.decay_epochs)


@dataclass(frozen=True)
class WarmupLinear:
    """Linear warm-up over the first ``warmup`` fraction of the ``total_steps`` steps, then linear decay to 0."""

    lr: float = bounded(5e-5, gt=0.0)
    warmup: float = bounded(0.1, gt=0.0, lt=1.0)
    total_steps: int | None = bounded(None, ge=1)

    def lr_at(self, step: int, epoch: int) -> float:
        if self.total_steps is None:
            raise ValueError("warmup_linear needs total_steps (set when a run starts)")
        x = (step + 1) / self.total_steps
        return self.lr * (x / self.warmup if x < self.warmup else max((1.0 - x) / (1.0 - self.warmup), 0.0))


@dataclass(frozen=True)
class Scaled:
    """``schedule``'s rate times ``factor``."""

    schedule: Schedule
    factor: float = 1.0

    def lr_at(self, step: int, epoch: int) -> float:
        return self.factor * self.schedule.lr_at(step, epoch)


# name -> schedule class; the class's fields are the schedule's options (``train.schedule.options``)
SCHEDULES: dict[str, type] = {
    "noam": Noam, "step": StepDecay, "constant": Constant, "warmup_multistep": WarmupMultiStep,
    "warmup_linear": WarmupLinear,
}


def lr_scale(scaling: str, model: nn.Module, where: str = "train.lr_scaling") -> float:
    """The factor ``train.lr_scaling`` puts on the XE schedule: 1 for ``none``; sqrt(k) for ``sqrt_groups``, k
    the groups of the model's group-wise layers (1 without any; a model mixing group counts is refused)."""
    if scaling == "none":
        return 1.0
    groups = {module.groups for module in model.modules() if isinstance(module, GroupedLinear)} or {1}
    if len(groups) > 1:
        raise ConfigError(f"{where}: sqrt_groups needs one group count, the model mixes k = {sorted(groups)}")
    return math.sqrt(groups.pop())


def build_schedule(spec: Spec, d_model: int, where: str = "train.schedule", total_steps: int | None = None) -> Schedule:
    """The schedule ``spec.name`` with ``spec.options`` (validated; errors name ``where``); a ``d_model``
    option left unset takes the model's width, a ``total_steps`` option left unset the run's ``total_steps``."""
    cls = lookup(SCHEDULES, spec.name, "schedule", f"{where}.name")
    schedule = parse_options(cls, spec.options, f"{where}.options")
    run = {"d_model": d_model, "total_steps": total_steps}
    for name, value in run.items():
        if any(f.name == name for f in dataclasses.fields(schedule)) and getattr(schedule, name) is None:
            schedule = dataclasses.replace(schedule, **{name: value})
    return schedule


def check_schedule(spec: Spec, where: str) -> None:
    """Raise the ``ConfigError`` building ``spec`` would raise."""
    build_schedule(spec, d_model=1, where=where)
