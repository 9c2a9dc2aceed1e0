"""Learning-rate schedules of the papers, as pure functions of (step, epoch).

A schedule is stateless: the trainer asks ``lr_at(step, epoch)`` before every optimiser step, so a
resumed run reproduces the schedule exactly from the saved step/epoch counters.

* ``noam`` — "Attention is all you need" schedule used by M2 (section 4.2, warm-up 10000):
  ``lr = scale * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5)`` with ``s = step + 1``.
* ``step`` — NG-SAN section 5.1: the base rate is ``min(t * 1e-4, 3e-4)`` with ``t`` the epoch
  number starting at 1; "after 6 epochs, the learning rate is decayed by 1/2 every 3 epochs".
  We read this literally: epochs 7-9 use half the rate, 10-12 a quarter, and so on
  (``factor ** ((t - 7) // 3 + 1)`` for ``t >= 7``).
* ``constant`` — a fixed rate (SCST, M2: 5e-6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol


class Schedule(Protocol):
    """Maps the 0-based optimiser step and 0-based epoch to a learning rate."""

    def lr_at(self, step: int, epoch: int) -> float: ...


@dataclass(frozen=True)
class Noam:
    """Warm-up then inverse square-root decay, scaled by ``d_model^-0.5``."""

    d_model: int
    warmup: int = 10000
    scale: float = 1.0

    def lr_at(self, step: int, epoch: int) -> float:
        s = step + 1
        return self.scale * self.d_model**-0.5 * min(s**-0.5, s * self.warmup**-1.5)


@dataclass(frozen=True)
class StepDecay:
    """NG-SAN: linear epoch warm-up to ``max_lr`` then halving every ``every`` epochs after ``start``."""

    base_lr: float = 1e-4
    max_lr: float = 3e-4
    start: int = 6
    every: int = 3
    factor: float = 0.5

    def lr_at(self, step: int, epoch: int) -> float:
        t = epoch + 1
        lr = min(t * self.base_lr, self.max_lr)
        if t > self.start:
            lr *= self.factor ** ((t - self.start - 1) // self.every + 1)
        return lr


@dataclass(frozen=True)
class Constant:
    """A fixed learning rate."""

    lr: float

    def lr_at(self, step: int, epoch: int) -> float:
        return self.lr


SCHEDULES: dict[str, Callable[..., Schedule]] = {
    "noam": lambda *, d_model, warmup, lr, **_: Noam(d_model=d_model, warmup=warmup, scale=lr),
    "step": lambda *, base_lr, max_lr, decay_start_epoch, decay_every, decay_factor, **_: StepDecay(
        base_lr, max_lr, decay_start_epoch, decay_every, decay_factor
    ),
    "constant": lambda *, lr, **_: Constant(lr),
}


def build_schedule(name: str, **kwargs: float) -> Schedule:
    """Build a schedule by name; the kwargs are the ``ScheduleConfig`` fields plus ``d_model``."""
    try:
        factory = SCHEDULES[name]
    except KeyError:
        raise ValueError(f"unknown schedule {name!r}; valid: {', '.join(sorted(SCHEDULES))}") from None
    return factory(**kwargs)
