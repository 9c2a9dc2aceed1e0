"""Multi-head scaled dot-product attention (Vaswani et al. 2017, "Attention is all you need", Eq. 1 and
Sec. 3.2.2; the MHA sub-layer of SAN in NG-SAN Sec. 3.1-3.2):

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + bias) V,   heads concatenated and projected by W_O.

The fused path uses ``torch.nn.functional.scaled_dot_product_attention``; ``need_weights=True`` takes an
explicit path that also returns the attention weights (for visualisation).
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlattn.attention.cache import KVCache


def attention_logits_mask(mask: Tensor | None, bias: Tensor | None) -> Tensor | None:
    """Merge a bool mask (True = attend) and a float bias into one SDPA ``attn_mask`` (same broadcast shape)."""
    if bias is None:
        return mask
    if mask is None:
        return bias
    return bias.masked_fill(~mask, float("-inf"))


class MultiHeadAttention(nn.Module):
    """Vanilla multi-head attention: ``forward(query (B,Nq,D), key (B,Nk,D), value (B,Nk,D)) -> (B,Nq,D)``."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model {d_model} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        for linear in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, N, D) -> (B, H, N, d_k)."""
        return x.unflatten(-1, (self.num_heads, self.d_head)).transpose(1, 2)

    def merge_heads(self, x: Tensor) -> Tensor:
        """(B, H, N, d_k) -> (B, N, D)."""
        return x.transpose(1, 2).flatten(2)

    def project_key_value(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Projected keys and values, (B, H, Nk, d_k) each."""
        return self.split_heads(self.k_proj(key)), self.split_heads(self.v_proj(value))

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        *,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend ``query`` (B, Nq, D) over ``key``/``value`` (B, Nk, D); returns (B, Nq, D).

        ``mask``: bool, True = attend, broadcastable to (B, H, Nq, Nk). ``bias``: float added to the logits.
        ``cache``: projected keys/values are fetched through it (appended or computed once).
        ``need_weights``: also return the attention weights (B, H, Nq, Nk).
        """
        q = self.split_heads(self.q_proj(query))  # (B, H, Nq, d_k)
        project = partial(self.project_key_value, key, value)
        k, v = project() if cache is None else cache.fetch(project)  # (B, H, Nk, d_k)
        attn_mask = attention_logits_mask(mask, bias)
        dropout = self.dropout if self.training else 0.0
        if need_weights:
            out, weights = scaled_dot_product_with_weights(q, k, v, attn_mask, dropout)
            return self.out_proj(self.merge_heads(out)), weights
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout)  # (B, H, Nq, d_k)
        return self.out_proj(self.merge_heads(out))


def scaled_dot_product_with_weights(
    q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, dropout: float
) -> tuple[Tensor, Tensor]:
    """Explicit softmax(q k^T / sqrt(d_k) + attn_mask) v; returns (out (B,H,Nq,d_k), weights (B,H,Nq,Nk)).

    ``attn_mask`` follows SDPA: bool (True = attend) or float added to the logits. The weights are the
    softmax before dropout; dropout (training only) is applied to the weights used for the output.
    """
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Nq, Nk)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        logits = logits.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        logits = logits + attn_mask
    weights = logits.softmax(dim=-1)  # (B, H, Nq, Nk)
    return F.dropout(weights, dropout) @ v, weights
