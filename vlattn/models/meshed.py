"""Meshed cross-attention (Cornia et al. 2020, "Meshed-Memory Transformer for Image Captioning", Sec. 3.2,
Eq. 6-9; softmax gating: Sec. 4.3, "Meshed Connectivity"):

    C(X_i, Y)    = Attention(W_q Y, W_k X_i, W_v X_i)                        (Eq. 7, one module for all i)
    alpha_i      = gate(W_i [Y; C(X_i, Y)] + b_i)                             (Eq. 8, W_i: 2d -> d per level)
    M_mesh(X, Y) = sum_i alpha_i * C(X_i, Y) / sqrt(N)                        (Eq. 6 and Sec. 4.2)
    Z            = AddNorm(M_mesh(X, Y))                                      (Eq. 9)

over the N encoder levels the site is connected to (all of them, or only level i for the 1-to-1 ablation).
``gate`` is a key of :data:`GATES`: the paper's element-wise sigmoid, or a softmax across the levels (the
Table 1 ablation, which keeps the 1/sqrt(N) scale and changes only the gate).

The site plugs into :class:`~vlattn.models.decoder.TransformerDecoder` as its cross-attention site. Its
cache is one :class:`~vlattn.attention.cache.StaticKVCache` per level, so the keys/values of every level are
projected once per image and kept once per image (an image's beams attend as one block of queries). W_q Y is
shared by every level (Eq. 7): mechanisms with ``attend_each`` (the multi-head family) project the queries once
for all levels and apply the output projection to all levels in one product.

Residual placement (``residual``, a key of :data:`RESIDUALS`):

- ``"paper"`` (default): Eq. 9 as written — C is the bare attention of Eq. 7, the gates see it, and one
  AddNorm wraps the gated sum: Z = LayerNorm(Y + Dropout(M_mesh)).
- ``"official"``: the released code (``MeshedDecoderLayer`` with its ``MultiHeadAttention`` wrapper, whose
  LayerNorm and dropout live inside the attention module). Each level's cross-attention gets its own
  residual + LayerNorm with the query, one LayerNorm shared by all levels, a fresh dropout mask per level:

      C'_i  = LayerNorm(Y + Dropout(C(X_i, Y)))
      alpha_i = sigmoid(W_i [Y; C'_i] + b_i)                                   (the gates see C'_i)
      Z     = sum_i alpha_i * C'_i / sqrt(N)                                    (no outer AddNorm)

  Z then enters the feed-forward's AddNorm directly. The parameters are the same (one LayerNorm per site),
  so a state dict maps one to one; the released code also multiplies every sub-layer output by the
  query padding mask, which :class:`~vlattn.models.decoder.TransformerDecoder` reproduces with ``pad_id``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import Tensor, nn

from vlattn.attention import StaticKVCache
from vlattn.models.decoder import CROSS_CONTEXT, Memories, per_image
from vlattn.models.encoder import Memory

# gate name -> map from gate logits (N, B, T, d) to weights alpha (N, B, T, d)
GATES: dict[str, Callable[[Tensor], Tensor]] = {
    "sigmoid": torch.sigmoid,  # Eq. 8: each level weighted independently, alpha in (0, 1)
    "softmax": partial(torch.softmax, dim=0),  # ablation: weights of each element sum to 1 across levels
}


class MeshedCrossAttention(nn.Module):
    """Gated cross-attention over several encoder levels with one shared attention module (Eq. 6-9).

    ``forward(x (B,T,d), memories, cache) -> (B,T,d)`` attends to the levels ``levels`` (indices into L) of
    ``memories[memory].states``; one gate projection W_i (2d -> d, with bias) per level; ``norm`` is the
    AddNorm (x, y) -> (B,T,d): around the gated sum (``residual="paper"``, Eq. 9) or around each level's
    attention (``"official"``, see the module docstring).
    """

    def __init__(
        self, attention: nn.Module, norm: nn.Module, d_model: int, levels: Sequence[int], gating: str = "sigmoid",
        memory: str = "regions", residual: str = "paper",
    ) -> None:
        super().__init__()
        if not levels:
            raise ValueError("meshed cross-attention needs at least one encoder level")
        self.attention = attention
        self.levels = tuple(levels)
        self.gating = gating
        self.memory = memory
        self.residual = residual
        self.gate_proj = nn.ModuleList(nn.Linear(2 * d_model, d_model) for _ in self.levels)  # W_i, b_i
        for linear in self.gate_proj:
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)
        self.norm = norm

    def extra_repr(self) -> str:
        return f"levels={self.levels}, gating={self.gating!r}, residual={self.residual!r}"

    def new_cache(self) -> list[StaticKVCache]:
        """One empty compute-once cache per connected level."""
        return [StaticKVCache() for _ in self.levels]

    def attend(self, x: Tensor, memory: Memory, cache: list[StaticKVCache] | None = None) -> Tensor:
        """C(X_i, Y) for every connected level: (N, R, T, d), from ``x`` (R, T, d) and ``memory`` (B, L, Nr, d),
        R = B g decoding rows grouped by image."""
        mask = memory.key_mask  # (B, 1, 1, Nr) or None: padded regions are never attended to
        caches = cache if cache is not None else [None] * len(self.levels)
        queries = per_image(x, memory.states.shape[0])  # (B, g T, d)
        sources = [
            (memory.states[:, level], memory.states[:, level], level_cache)
            for level, level_cache in zip(self.levels, caches, strict=True)
        ]
        each = getattr(self.attention, "attend_each", None)
        if each is not None:
            attended = each(queries, sources, mask=mask, context=CROSS_CONTEXT)  # (N, B, g T, d)
        else:
            attended = torch.stack([
                self.attention(queries, key, value, mask=mask, cache=level_cache, context=CROSS_CONTEXT).out
                for key, value, level_cache in sources
            ])
        return attended.reshape(len(self.levels), *x.shape[:-1], -1)  # (N, R, T, d)

    def gates(self, x: Tensor, attended: Tensor) -> Tensor:
        """alpha_i of Eq. 8: (N, R, T, d) from the queries ``x`` (R, T, d) and ``attended`` (N, R, T, d)."""
        logits = torch.stack(
            [proj(torch.cat([x, level], dim=-1)) for proj, level in zip(self.gate_proj, attended, strict=True)]
        )  # (N, R, T, d)
        return GATES[self.gating](logits)

    def mesh(self, x: Tensor, attended: Tensor) -> Tensor:
        """Eq. 6 with the gates of Eq. 8: sum_i alpha_i * attended_i / sqrt(N), (B, T, d)."""
        return (self.gates(x, attended) * attended).sum(dim=0) / math.sqrt(len(self.levels))

    def forward(self, x: Tensor, memories: Memories, cache: list[StaticKVCache] | None = None) -> Tensor:
        """``x`` (B, T, d) -> (B, T, d)."""
        attended = self.attend(x, memories[self.memory], cache)  # (N, B, T, d)
        return RESIDUALS[self.residual](self, x, attended)


def paper_residual(site: MeshedCrossAttention, x: Tensor, attended: Tensor) -> Tensor:
    """Eq. 9: one AddNorm around the gated sum of the bare cross-attentions."""
    return site.norm(x, site.mesh(x, attended))


def official_residual(site: MeshedCrossAttention, x: Tensor, attended: Tensor) -> Tensor:
    """The released code: AddNorm per level (shared norm, own dropout mask), gates over those, no outer norm."""
    return site.mesh(x, site.norm(x[None], attended))  # norm: (1, B, T, d) + (N, B, T, d) -> (N, B, T, d)


# residual placement -> (site, queries (B, T, d), attended (N, B, T, d)) -> (B, T, d)
RESIDUALS: dict[str, Callable[[MeshedCrossAttention, Tensor, Tensor], Tensor]] = {
    "paper": paper_residual,
    "official": official_residual,
}
