"""Group-wise linear transformation (LW-Transformer, Luo et al. 2022, Sec. III-B, Eq. 5):

    tau_Group(X) = [X'_1, ..., X'_k],   X'_i = X_i W_i + b_i,

the input channels split into ``k`` contiguous groups X_i of ``in_features / k`` channels, each mapped to
``out_features / k`` channels, the results concatenated in group order. With shared weights (the paper's WS)
every group uses one W and b ("k^2 - 1 / k^2" fewer parameters than the dense layer); otherwise each group has
its own ("k - 1 / k" fewer). Either way the multiply-adds are ``1/k`` of the dense layer's.

Both variants run as one matrix product over all groups — shared: one GEMM whose rows are the (position,
group) pairs; separate: one batched GEMM over the groups (``torch.baddbmm``) — never a Python loop.
With ``groups == 1`` the layer is an ``nn.Linear`` with the same parameter names and shapes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class GroupedLinear(nn.Module):
    """``forward(x (..., in_features)) -> (..., out_features)``, block-diagonal with ``groups`` blocks.

    ``weight``: (out/k, in/k) when ``shared`` (or k == 1), else (k, out/k, in/k); ``bias``: (out/k,) or
    (k, out/k).
    """

    def __init__(self, in_features: int, out_features: int, groups: int, *, shared: bool, bias: bool = True) -> None:
        super().__init__()
        if in_features % groups or out_features % groups:
            raise ValueError(f"features {in_features} -> {out_features} are not divisible by {groups} groups")
        self.groups = groups
        self.in_features, self.out_features = in_features, out_features
        self.shared = shared or groups == 1
        lead = () if self.shared else (groups,)
        self.weight = nn.Parameter(torch.empty(*lead, out_features // groups, in_features // groups))
        self.bias = nn.Parameter(torch.empty(*lead, out_features // groups)) if bias else None
        self.reset_parameters()

    def blocks(self) -> Tensor:
        """The weight as (k', out/k, in/k) blocks (k' = 1 when shared), a view."""
        return self.weight.view(-1, *self.weight.shape[-2:])

    def reset_parameters(self) -> None:
        """``nn.Linear``'s initialisation applied to each group's (out/k, in/k) block (fan-in in/k)."""
        for block in self.blocks():
            nn.init.kaiming_uniform_(block, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.weight.shape[-1])
            nn.init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, groups={self.groups}, "
                f"shared={self.shared}, bias={self.bias is not None}")

    def forward(self, x: Tensor) -> Tensor:
        """(..., in) -> (..., out); group g reads input channels [g*in/k, (g+1)*in/k) and writes output
        channels [g*out/k, (g+1)*out/k)."""
        grouped = x.unflatten(-1, (self.groups, -1))  # (..., k, in/k)
        if self.shared:
            return F.linear(grouped, self.weight, self.bias).flatten(-2)  # (..., out)
        rows = grouped.reshape(-1, self.groups, grouped.shape[-1]).transpose(0, 1)  # (k, M, in/k)
        if self.bias is None:
            out = torch.bmm(rows, self.weight.transpose(1, 2))
        else:
            out = torch.baddbmm(self.bias[:, None], rows, self.weight.transpose(1, 2))  # (k, M, out/k)
        return out.transpose(0, 1).reshape(*x.shape[:-1], self.out_features)


def xavier_(linear: nn.Linear | GroupedLinear) -> None:
    """Xavier-uniform weights (per group block: fans in/k and out/k) and zero biases."""
    blocks = linear.blocks() if isinstance(linear, GroupedLinear) else linear.weight[None]
    for block in blocks:
        nn.init.xavier_uniform_(block)
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)
