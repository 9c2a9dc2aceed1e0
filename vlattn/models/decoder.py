"""Transformer caption decoder (Vaswani et al. 2017 Sec. 3.1; SAN decoder, NG-SAN Sec. 3.2; M2 Sec. 3.2
without meshing): word embedding + sinusoidal positions, then L post-LN layers of masked self-attention,
cross-attention over the encoded regions and FFN; a linear output layer (untied by default).

Extension points: each layer's self-attention comes from ``make_self_attention()`` and its whole
cross-attention *site* from ``make_cross_site(layer_index)``. A site maps
``(x (B,T,d), memory (B,L,N,d), memory_mask (B,N), cache) -> (B,T,d)`` including its residual + LayerNorm,
and ``new_cache()`` returns the cache object(s) it needs; M2's meshed cross-attention over all L encoder
layers is such a site. :class:`CrossAttentionSite` attends to one encoder level (the last by default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from vlattn.attention import KVCache, StaticKVCache
from vlattn.layers import FeedForward, PostNorm, SinusoidalPositions


def causal_mask(length: int, start: int, device: torch.device) -> Tensor | None:
    """Bool (length, start + length): query i (position start + i) attends keys 0..start + i.

    A single query at the end of the sequence attends to everything, so no mask (None) is needed.
    """
    if length == 1:
        return None
    keys = torch.arange(start + length, device=device)
    queries = torch.arange(start, start + length, device=device)
    return keys[None, :] <= queries[:, None]  # (T, start + T)


class CrossAttentionSite(nn.Module):
    """LN(x + CrossAttention(x, memory[:, level])), with the image keys/values cached once per image."""

    def __init__(self, attention: nn.Module, d_model: int, dropout: float, level: int = -1) -> None:
        super().__init__()
        self.attention = attention
        self.norm = PostNorm(d_model, dropout)
        self.level = level

    def new_cache(self) -> StaticKVCache:
        """An empty compute-once cache for the image keys/values."""
        return StaticKVCache()

    def forward(self, x: Tensor, memory: Tensor, memory_mask: Tensor, cache: StaticKVCache | None = None) -> Tensor:
        """``x`` (B, T, d), ``memory`` (B, L, N, d), ``memory_mask`` bool (B, N) -> (B, T, d)."""
        regions = memory[:, self.level]  # (B, N, d)
        mask = memory_mask[:, None, None, :]  # (B, 1, 1, N)
        return self.norm(x, self.attention(x, regions, regions, mask=mask, cache=cache))


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention site, FFN; each with post-LN residuals. (B, T, d) -> (B, T, d)."""

    def __init__(self, self_attention: nn.Module, cross_site: nn.Module, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.self_attn = self_attention
        self.self_norm = PostNorm(d_model, dropout)
        self.cross = cross_site
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.ffn_norm = PostNorm(d_model, dropout)

    def new_cache(self) -> dict[str, Any]:
        """Empty caches: appending self-attention K/V and whatever the cross site needs."""
        return {"self": KVCache(), "cross": self.cross.new_cache()}

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        memory_mask: Tensor,
        self_mask: Tensor | None,
        cache: dict[str, Any] | None = None,
    ) -> Tensor:
        """``x`` (B, T, d), ``memory`` (B, L, N, d), ``memory_mask`` (B, N), ``self_mask`` (T, t) or None."""
        self_cache, cross_cache = (None, None) if cache is None else (cache["self"], cache["cross"])
        x = self.self_norm(x, self.self_attn(x, x, x, mask=self_mask, cache=self_cache))
        x = self.cross(x, memory, memory_mask, cache=cross_cache)
        return self.ffn_norm(x, self.ffn(x))


class TransformerDecoder(nn.Module):
    """``forward(tokens (B,T), memory (B,L,N,d), memory_mask (B,N)) -> logits (B, T, V)``."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        d_ff: int,
        num_layers: int,
        dropout: float,
        max_positions: int,
        make_self_attention: Callable[[], nn.Module],
        make_cross_site: Callable[[int], nn.Module],
        pad_id: int = 0,
        tie_embeddings: bool = False,
        output_bias: bool = True,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.positions = SinusoidalPositions(d_model, max_positions)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            DecoderLayer(make_self_attention(), make_cross_site(i), d_model, d_ff, dropout)
            for i in range(num_layers)
        )
        self.output = nn.Linear(d_model, vocab_size, bias=output_bias)
        if tie_embeddings:
            self.output.weight = self.embed.weight

    def new_cache(self) -> list[dict[str, Any]]:
        """Empty per-layer caches for incremental decoding."""
        return [layer.new_cache() for layer in self.layers]

    def hidden(
        self,
        tokens: Tensor,
        memory: Tensor,
        memory_mask: Tensor,
        cache: list[dict[str, Any]] | None = None,
        start: int = 0,
    ) -> Tensor:
        """Final-layer states (B, T, d) of ``tokens`` (B, T) at positions start..start+T-1.

        With ``cache``, ``tokens`` are only the new positions and earlier ones come from the cache.
        Padding follows each caption, so the causal mask alone hides it from every real position.
        """
        length = tokens.shape[1]
        x = self.dropout(self.embed(tokens) + self.positions(length, start))  # (B, T, d)
        self_mask = causal_mask(length, start, tokens.device)
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, memory_mask, self_mask, None if cache is None else cache[i])
        return x

    def forward(self, tokens: Tensor, memory: Tensor, memory_mask: Tensor) -> Tensor:
        """Teacher-forced logits (B, T, V) for input ``tokens`` (B, T)."""
        return self.output(self.hidden(tokens, memory, memory_mask))
