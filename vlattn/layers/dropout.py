"""Dropout whose mask is drawn one of two ways (``model.dropout_mask``): torch's Bernoulli draw or a cheaper
comparison of uniform draws.

``nn.Dropout`` on the CPU draws its mask with ``bernoulli_`` (about 9 ns per element on this project's machine);
the ``uniform`` mask keeps an element where a uniform draw ``u ~ U[0, 1)`` is ``>= p`` — the same distribution
(P(keep) = 1 - p, survivors scaled by 1 / (1 - p)), but other random numbers, so a run's trajectory differs from
``bernoulli``'s.

Every model builds its dropout as :class:`Dropout`; the mask is a mode of the module, set model-wide by
:func:`set_dropout_mask` the way ``Module.train()`` sets ``training`` on every sub-module: no module is replaced
and nothing is found by name, so a model's structure and state dict do not depend on the option.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor, nn

DropoutMask = Literal["bernoulli", "uniform"]


class Dropout(nn.Dropout):
    """Inverted dropout, its mask torch's Bernoulli draw (``mask="bernoulli"``, exactly ``nn.Dropout``) or
    ``rand_like(x) >= p`` (``"uniform"``); (...) -> (...), identity in eval mode."""

    def __init__(self, p: float = 0.5, inplace: bool = False, mask: DropoutMask = "bernoulli") -> None:
        super().__init__(p, inplace)
        self.mask = check_mask(mask)

    def forward(self, x: Tensor) -> Tensor:
        if self.mask == "bernoulli":
            return super().forward(x)
        if not self.training or self.p == 0.0:
            return x
        if self.p >= 1.0:
            return x * 0.0
        keep = torch.rand_like(x).ge_(self.p).mul_(1.0 / (1.0 - self.p))  # (...) 0 or 1 / (1 - p)
        return x * keep

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, mask={self.mask}"


def check_mask(mask: str) -> DropoutMask:
    if mask not in get_args(DropoutMask):
        raise ValueError(f"unknown dropout mask {mask!r}; valid: {', '.join(get_args(DropoutMask))}")
    return mask  # type: ignore[return-value]


def set_dropout_mask(model: nn.Module, mask: DropoutMask) -> nn.Module:
    """Set the mask of every :class:`Dropout` of ``model`` (in place; returns ``model``).

    Dropout applied inside fused kernels (the attention weights' ``dropout_p`` of SDPA, an LSTM's ``dropout``) is not
    a module and keeps torch's own draw."""
    check_mask(mask)
    for module in model.modules():
        if isinstance(module, Dropout):
            module.mask = mask
    return model
