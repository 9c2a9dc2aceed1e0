"""Multi-head scaled dot-product attention (Vaswani et al. 2017, "Attention is all you need", Eq. 1 and
Sec. 3.2.2; the MHA sub-layer of SAN in NG-SAN Sec. 3.1-3.2):

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + bias) V,   heads concatenated and projected by W_O.

The fused path uses ``torch.nn.functional.scaled_dot_product_attention``; ``need_weights=True`` takes an
explicit path that also returns the attention weights (for visualisation), and so do queries/keys wider than
the values (G-MHA's expansion), which SDPA's CPU kernel cannot fuse. A query whose keys are all
masked gets zero weights and a zero attended value on both paths (what SDPA computes on the CPU).

Subclasses change one step and inherit the rest: :meth:`MultiHeadAttention.project_query` and
:meth:`MultiHeadAttention.project_key_value` (NSA normalises the queries and/or keys over the regions, with the
context's query mask), :meth:`MultiHeadAttention.key_value_source` / the cache adapter and
:meth:`MultiHeadAttention.attend` (memory slots), or :meth:`MultiHeadAttention.logit_bias` (GSA's geometric bias,
computed from the layer's own inputs). :meth:`MultiHeadAttention.attend_each` attends several key/value sources
with one query projection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlattn.attention.base import AttentionContext, AttentionDims, AttentionOutput, Capabilities
from vlattn.attention.cache import JoinedAppend, KeyValueSource, KVCache
from vlattn.layers.grouped import xavier_


def attention_logits_mask(mask: Tensor | None, bias: Tensor | None) -> Tensor | None:
    """Merge a bool mask (True = attend) and a float bias into one SDPA ``attn_mask`` (same broadcast shape)."""
    if bias is None:
        return mask
    if mask is None:
        return bias
    return bias.masked_fill(~mask, float("-inf"))


def add_bias(first: Tensor | None, second: Tensor | None) -> Tensor | None:
    """Sum of two optional float logit biases (either may be None)."""
    if first is None:
        return second
    return first if second is None else first + second


class MultiHeadAttention(nn.Module):
    """Vanilla multi-head attention: ``forward(query (B,Nq,D), key (B,Nk,D), value (B,Nk,D))`` ->
    :class:`AttentionOutput` with ``out`` (B, Nq, D)."""

    @dataclass
    class Options:
        """Plain multi-head attention has no options of its own."""

    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, dims: AttentionDims, options: Options | None = None) -> None:
        super().__init__()
        if dims.d_model % dims.num_heads:
            raise ValueError(f"d_model {dims.d_model} is not divisible by num_heads {dims.num_heads}")
        self.num_heads = dims.num_heads
        self.d_head = dims.d_model // dims.num_heads  # per-head width of the values
        self.out_dim = dims.d_model
        self.dropout = dims.dropout
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = self.projections(dims.d_model, options)
        for linear in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            xavier_(linear)

    def projections(self, d_model: int, options: object) -> tuple[nn.Module, nn.Module, nn.Module, nn.Module]:
        """The query, key, value and output projections (modules with ``weight`` and ``bias``): dense
        d -> d here; subclasses with options of their own (grouping) override it."""
        linear = partial(nn.Linear, d_model, d_model)
        return linear(), linear(), linear(), linear()

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, N, H * d) -> (B, H, N, d) (queries/keys and values may have different head widths d)."""
        return x.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)

    def merge_heads(self, x: Tensor) -> Tensor:
        """(B, H, N, d_k) -> (B, N, D)."""
        return x.transpose(1, 2).flatten(2)

    def project_query(self, query: Tensor, context: AttentionContext | None) -> Tensor:
        """Projected queries (B, H, Nq, d_k)."""
        return self.split_heads(self.q_proj(query))

    def project_key_value(self, key: Tensor, value: Tensor, context: AttentionContext | None) -> tuple[Tensor, Tensor]:
        """Projected keys and values, (B, H, Nk, d_k) each."""
        return self.split_heads(self.k_proj(key)), self.split_heads(self.v_proj(value))

    def key_value_source(self, cache: KeyValueSource | None) -> KeyValueSource | None:
        """The object keys/values are fetched through (the cache itself here; memory slots wrap it)."""
        return cache

    def logit_bias(self, query: Tensor, key: Tensor, context: AttentionContext | None) -> Tensor | None:
        """An extra float bias on the logits computed from the layer's inputs (None for plain MHA)."""
        return None

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        *,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        cache: KeyValueSource | None = None,
        context: AttentionContext | None = None,
        need_weights: bool = False,
    ) -> AttentionOutput:
        """Attend ``query`` (B, Nq, D) over ``key``/``value`` (B, Nk, D); ``out`` is (B, Nq, D).

        ``mask``: bool, True = attend, broadcastable to (B, H, Nq, Nk). ``bias``: float added to the logits.
        ``cache``: projected keys/values are fetched through it (appended or computed once).
        ``need_weights``: also return the attention weights (B, H, Nq, Nk).
        """
        if query is key and key is value and isinstance(cache, KVCache) and self.joins_projections:
            q, cache = self.project_joined(query, cache)  # cache: the new keys/values, ready to append
        else:
            q = self.project_query(query, context)  # (B, H, Nq, d_k)
        out, weights = self.attend(
            q, query, key, value, mask=mask, bias=bias, cache=cache, context=context, need_weights=need_weights
        )
        return AttentionOutput(self.out_proj(out), weights)

    @property
    def joins_projections(self) -> bool:
        """Whether self-attention through an appending cache may project queries, keys and values in one product
        (:meth:`project_joined`): only when none of the projection steps is overridden and all have biases."""
        steps = ("projections", "project_query", "project_key_value", "key_value_source")
        plain = all(getattr(type(self), step) is getattr(MultiHeadAttention, step) for step in steps)
        projections = (self.q_proj, self.k_proj, self.v_proj)
        return plain and all(isinstance(p, nn.Linear) and p.bias is not None for p in projections)

    def project_joined(self, x: Tensor, cache: KVCache) -> tuple[Tensor, KeyValueSource]:
        """Self-attention's queries, keys and values of the new positions ``x`` (B, n, D) in one product with the
        weights [W_q; W_k and W_v interleaved head by head], which ``cache`` keeps for its lifetime (one search;
        built on first use, differentiable). Returns the queries (B, H, n, d_k) and a source appending the keys and
        values to ``cache`` side by side (its buffer's layout) in one copy."""
        if cache.projection is None:
            def stacked(name: str) -> Tensor:  # [W_q; W_k of head 1, W_v of head 1, ...] (or the biases)
                by_head = [getattr(p, name).unflatten(0, (self.num_heads, -1)) for p in (self.k_proj, self.v_proj)]
                return torch.cat([getattr(self.q_proj, name), torch.cat(by_head, 1).flatten(0, 1)])

            cache.projection = (stacked("weight"), stacked("bias"))
        projected = F.linear(x, *cache.projection)  # (B, n, H d_k + H (d_k + d_v))
        width = self.q_proj.out_features
        joined = self.split_heads(projected[..., width:])  # (B, H, n, d_k + d_v)
        return self.split_heads(projected[..., :width]), JoinedAppend(cache, joined, width // self.num_heads)

    def attend_each(
        self,
        query: Tensor,
        sources: Sequence[tuple[Tensor, Tensor, KeyValueSource | None]],
        *,
        mask: Tensor | None = None,
        context: AttentionContext | None = None,
    ) -> Tensor:
        """``query`` (B, Nq, D) attending each ``(key, value, cache)`` of ``sources`` in turn: (S, B, Nq, D), the
        same as stacking :meth:`forward` over the sources, with the query projected once and one output
        projection for all (M2's meshed cross-attention over the encoder levels)."""
        q = self.project_query(query, context)  # (B, H, Nq, d_k)
        merged = [
            self.attend(q, query, key, value, mask=mask, cache=cache, context=context)[0] for key, value, cache in sources
        ]
        return self.out_proj(torch.stack(merged))  # (S, B, Nq, D)

    def attend(
        self, q: Tensor, query: Tensor, key: Tensor, value: Tensor, *, mask: Tensor | None = None,
        bias: Tensor | None = None, cache: KeyValueSource | None = None, context: AttentionContext | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """The attended values of the projected queries ``q`` (B, H, Nq, d_k), heads merged (B, Nq, H d_v), before
        the output projection; and the weights (B, H, Nq, Nk) if ``need_weights``. ``query`` is the unprojected
        query (for :meth:`logit_bias`)."""
        project = partial(self.project_key_value, key, value, context)
        source = self.key_value_source(cache)
        k, v = project() if source is None else source.fetch(project)  # (B, H, Nk, d_k)
        attn_mask = attention_logits_mask(mask, add_bias(bias, self.logit_bias(query, key, context)))
        dropout = self.dropout if self.training else 0.0
        if need_weights or q.shape[-1] != v.shape[-1]:
            # (SDPA's CPU kernel fuses only equal query/value widths; its unfused fallback is ~2x slower than this)
            out, weights = scaled_dot_product_with_weights(q, k, v, attn_mask, dropout)
            return self.merge_heads(out), weights if need_weights else None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout)  # (B, H, Nq, d_k)
        return self.merge_heads(out), None


def scaled_dot_product_with_weights(
    q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, dropout: float
) -> tuple[Tensor, Tensor]:
    """Explicit softmax(q k^T / sqrt(d_k) + attn_mask) v; returns (out (B,H,Nq,d_k), weights (B,H,Nq,Nk)).

    ``attn_mask`` follows SDPA: bool (True = attend) or float added to the logits. The weights are the
    softmax before dropout; dropout (training only) is applied to the weights used for the output. Rows
    whose keys are all masked get zero weights (SDPA's CPU result), not NaN.
    """
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Nq, Nk)
    weights = logits.softmax(-1) if attn_mask is None else masked_softmax(apply_logits_mask(logits, attn_mask))
    return F.dropout(weights, dropout) @ v, weights


def apply_logits_mask(logits: Tensor, attn_mask: Tensor | None) -> Tensor:
    """``logits`` with an SDPA-style ``attn_mask`` applied: bool (True = attend) -> -inf elsewhere; float -> added."""
    if attn_mask is None:
        return logits
    if attn_mask.dtype == torch.bool:
        return logits.masked_fill(~attn_mask, float("-inf"))
    return logits + attn_mask


def masked_softmax(logits: Tensor) -> Tensor:
    """Softmax over the last axis where a row of only ``-inf`` gives zeros instead of NaN."""
    empty = torch.isneginf(logits).all(dim=-1, keepdim=True)  # (..., 1)
    return logits.masked_fill(empty, 0.0).softmax(dim=-1).masked_fill(empty, 0.0)
