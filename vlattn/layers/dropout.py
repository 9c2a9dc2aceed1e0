"""Dropout masks: torch's Bernoulli draw or a cheaper comparison of uniform draws (``model.dropout_mask``).

``nn.Dropout`` on the CPU draws its mask with ``bernoulli_`` (about 9 ns per element on this project's machine);
:class:`UniformDropout` keeps an element where a uniform draw ``u ~ U[0, 1)`` is ``>= p`` — the same distribution
(P(keep) = 1 - p, survivors scaled by 1 / (1 - p)), but other random numbers, so a run's trajectory differs from
``bernoulli``'s.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

DropoutMask = Literal["bernoulli", "uniform"]


class UniformDropout(nn.Dropout):
    """Inverted dropout with the mask ``rand_like(x) >= p``; (...) -> (...), identity in eval mode."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.p >= 1.0:
            return x * 0.0
        mask = torch.rand_like(x).ge_(self.p).mul_(1.0 / (1.0 - self.p))  # (...) 0 or 1 / (1 - p)
        return x * mask


def use_dropout_mask(model: nn.Module, mask: DropoutMask) -> nn.Module:
    """``model`` with every ``nn.Dropout`` module drawing its mask the ``mask`` way (in place; returns ``model``).

    Dropout applied inside fused kernels (the attention weights' ``dropout_p`` of SDPA) is not a module and keeps
    torch's own draw."""
    if mask == "bernoulli":
        return model
    if mask != "uniform":
        raise ValueError(f"unknown dropout mask {mask!r}; valid: bernoulli, uniform")
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Dropout:
                setattr(module, name, UniformDropout(child.p, child.inplace))
    return model
