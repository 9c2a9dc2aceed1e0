"""Transformer encoder over detector regions (SAN encoder, NG-SAN Sec. 3.2, Fig. 1; M2 paper Sec. 3.1 without
memory): input projection Linear(D->d) + ReLU + dropout + LayerNorm, then L post-LN layers of
self-attention + FFN. No positions: regions have no order (NG-SAN Sec. 3.2).

The padding mask comes from ``region_mask`` (True = real region) and is applied to the keys of every layer;
it is never recomputed from activations (the M2 anchor derives it after LayerNorm, so padding leaks in).
The stack returns the output of *every* layer, (B, L, N, d), for decoders that attend to all of them (M2).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from vlattn.layers import FeedForward, PostNorm


class EncoderLayer(nn.Module):
    """x <- LN(x + SelfAttention(x)); x <- LN(x + FFN(x)); (B, N, d) -> (B, N, d)."""

    def __init__(self, attention: nn.Module, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.self_attn = attention
        self.attn_norm = PostNorm(d_model, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.ffn_norm = PostNorm(d_model, dropout)

    def forward(self, x: Tensor, mask: Tensor, bias: Tensor | None = None) -> Tensor:
        """``x`` (B, N, d), ``mask`` bool (B, 1, 1, N) True = real key, ``bias`` (B, H|1, N, N) or None."""
        x = self.attn_norm(x, self.self_attn(x, x, x, mask=mask, bias=bias))
        return self.ffn_norm(x, self.ffn(x))


class TransformerEncoder(nn.Module):
    """Region encoder: ``forward(features (B,N,D), region_mask (B,N)) -> all layer outputs (B, L, N, d)``.

    ``make_attention()`` builds the self-attention module of each layer (any registered mechanism).
    """

    def __init__(
        self,
        feature_dim: int,
        d_model: int,
        d_ff: int,
        num_layers: int,
        dropout: float,
        make_attention: Callable[[], nn.Module],
    ) -> None:
        super().__init__()
        self.input_proj = nn.Sequential(
            nn.Linear(feature_dim, d_model), nn.ReLU(), nn.Dropout(dropout), nn.LayerNorm(d_model)
        )
        self.layers = nn.ModuleList(
            EncoderLayer(make_attention(), d_model, d_ff, dropout) for _ in range(num_layers)
        )

    def forward(self, features: Tensor, region_mask: Tensor, bias: Tensor | None = None) -> Tensor:
        """``features`` (B, N, D), ``region_mask`` bool (B, N) True = real; ``bias`` added to every layer's
        self-attention logits. Returns the stacked layer outputs (B, L, N, d)."""
        mask = region_mask[:, None, None, :]  # (B, 1, 1, N): padded regions are never attended to
        x = self.input_proj(features)  # (B, N, d)
        outputs = []
        for layer in self.layers:
            x = layer(x, mask, bias)
            outputs.append(x)
        return torch.stack(outputs, dim=1)  # (B, L, N, d)
