"""Normalisations of a set of vectors (B, N, C) that ignore padded elements, for NSA (NG-SAN Sec. 4.1, Eq. 6;
Table 2 compares the three):

- ``instance`` (IN, Eq. 6): per instance b and channel c, mean and variance over the N elements of the set::

      x_hat[b,t,c] = (x[b,t,c] - mu[b,c]) / sqrt(var[b,c] + eps),
      mu[b,c] = mean_t x[b,t,c],   var[b,c] = mean_t (x[b,t,c] - mu[b,c])^2   (biased, as IN)

  with the means taken over the *real* elements only (``mask`` True), so padding never changes the result;
- ``batch`` (BN): per channel, over the real elements of every instance of the batch in training; running
  statistics (momentum :data:`BATCH_NORM_MOMENTUM`, unbiased running variance, as ``torch.nn.BatchNorm1d``)
  in evaluation; with several processes each uses its own batch (not synchronised, like ``BatchNorm1d``);
- ``layer`` (LN): per element, over its C channels (padding is irrelevant).

``affine`` adds the channel-wise gamma (init 1) and beta (init 0). ``eps`` is added to the variance
(the paper gives no value; 1e-5 is the default of PyTorch's and the original IN/BN implementations).
Every normaliser maps ``forward(x (B, N, C), mask (B, N) bool or None) -> (B, N, C)``; ``mask`` None means
every element is real. ``centres_channels`` tells whether it subtracts a per-channel mean (IN, BN), which
makes a bias added to x beforehand redundant.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

BATCH_NORM_MOMENTUM = 0.1


def masked_moments(x: Tensor, mask: Tensor | None, dims: tuple[int, ...]) -> tuple[Tensor, Tensor, Tensor]:
    """Mean, biased variance and count of ``x`` (B, N, C) over ``dims`` counting only the real elements
    (``mask`` (B, N) True); all keep their reduced dims. A reduction over no real element gives mean 0."""
    weight = torch.ones_like(x[..., :1]) if mask is None else mask[..., None].to(x.dtype)  # (B, N, 1)
    count = weight.sum(dims, keepdim=True)
    mean = (x * weight).sum(dims, keepdim=True) / count.clamp(min=1.0)
    var = ((x - mean).square() * weight).sum(dims, keepdim=True) / count.clamp(min=1.0)
    return mean, var, count


class MaskedNorm(nn.Module):
    """Shared parts: ``eps`` and the optional channel-wise affine transformation."""

    centres_channels: ClassVar[bool] = True

    def __init__(self, channels: int, eps: float = 1e-5, affine: bool = False) -> None:
        super().__init__()
        self.channels = channels
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels)) if affine else None  # gamma (C,)
        self.bias = nn.Parameter(torch.zeros(channels)) if affine else None  # beta (C,)

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.eps}, affine={self.weight is not None}"

    def affine(self, x: Tensor) -> Tensor:
        """gamma * x + beta when affine, else x."""
        return x if self.weight is None else x * self.weight + self.bias


class MaskedInstanceNorm(MaskedNorm):
    """IN over the set axis per instance and channel (Eq. 6), padding excluded: (B, N, C) -> (B, N, C)."""

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        mean, var, _ = masked_moments(x, mask, (1,))  # (B, 1, C) each
        return self.affine((x - mean) * torch.rsqrt(var + self.eps))


class MaskedBatchNorm(MaskedNorm):
    """BN over the real elements of the whole batch per channel, running statistics in eval mode."""

    def __init__(self, channels: int, eps: float = 1e-5, affine: bool = False) -> None:
        super().__init__(channels, eps, affine)
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if self.training:
            mean, var, count = masked_moments(x, mask, (0, 1))  # (1, 1, C) each
            with torch.no_grad():
                unbiased = var * count / (count - 1).clamp(min=1.0)
                self.running_mean.lerp_(mean.flatten(), BATCH_NORM_MOMENTUM)
                self.running_var.lerp_(unbiased.flatten(), BATCH_NORM_MOMENTUM)
        else:
            mean, var = self.running_mean, self.running_var
        return self.affine((x - mean) * torch.rsqrt(var + self.eps))


class LayerNormOverChannels(MaskedNorm):
    """LN of each element over its C channels (Table 2 "LN"); ``mask`` is not needed."""

    centres_channels: ClassVar[bool] = False

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return F.layer_norm(x, (self.channels,), self.weight, self.bias, self.eps)


# name -> normaliser class, built as cls(channels, eps, affine)
MASKED_NORMS: dict[str, type[MaskedNorm]] = {
    "instance": MaskedInstanceNorm,
    "batch": MaskedBatchNorm,
    "layer": LayerNormOverChannels,
}
