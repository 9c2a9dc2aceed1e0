"""Additive (top-down) attention: Bahdanau et al. 2015, Eq. 6; as used by the Up-Down captioner's
attention LSTM (Anderson et al. 2018, "Bottom-Up and Top-Down Attention", Eq. 3-5):

    a_{i,t} = w_a^T tanh(W_va v_i + W_ha h_t),   alpha_t = softmax(a_t),   v_hat_t = sum_i alpha_{i,t} v_i.

Queries (the LSTM state h, ``query_dim``) and keys (the regions v, ``key_dim``) have different sizes and there
are no heads; the attended output is a weighted sum of the *unprojected* values, so it has the values' size
(``out_dim = key_dim``). ``d_model`` is the hidden size of the scoring MLP (512 in Anderson et al.).
The projected keys W_va v are computed once per image through a compute-once cache during decoding.
Masks and biases follow the shared contract with a single head: broadcastable to (B, 1, Nq, Nk).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlattn.attention.base import AttentionContext, AttentionDims, AttentionOutput, Capabilities, Site
from vlattn.attention.cache import KeyValueSource, fetch_projections
from vlattn.attention.mha import apply_logits_mask, attention_logits_mask, masked_softmax


class AdditiveAttention(nn.Module):
    """``forward(query (B,Nq,Dq), key (B,Nk,Dk), value (B,Nk,Dk))`` -> ``out`` (B, Nq, Dk), weights
    (B, 1, Nq, Nk)."""

    @dataclass
    class Options:
        """``score_bias``: a bias in the scoring layer w_a. The paper's Eq. 3 has none, and a constant added to
        every logit cancels in the softmax (its gradient is zero in exact arithmetic); self-critical.pytorch's
        ``alpha_net`` has one, so its layout (Up-Down's ``self_critical`` variant) turns it on."""

        score_bias: bool = False

    capabilities: ClassVar[Capabilities] = Capabilities(
        sites=frozenset({Site.CROSS}), cacheable=False, heads=False, query_dim_differs=True
    )

    def __init__(self, dims: AttentionDims, options: Options | None = None) -> None:
        super().__init__()
        options = options or self.Options()
        self.out_dim = dims.k_dim
        self.dropout = dims.dropout
        self.key_proj = nn.Linear(dims.k_dim, dims.d_model)  # W_va
        self.query_proj = nn.Linear(dims.q_dim, dims.d_model)  # W_ha
        self.score = nn.Linear(dims.d_model, 1, bias=options.score_bias)  # w_a

    def project_key_value(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Projected keys (B, Nk, d_model) and the values as they are (B, Nk, Dk)."""
        return self.key_proj(key), value

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
        """Attend ``query`` (B, Nq, Dq) over ``key``/``value`` (B, Nk, Dk); ``out`` (B, Nq, Dk)."""
        keys, values = fetch_projections(cache, lambda: self.project_key_value(key, value))  # (B, Nk, d), (B, Nk, Dk)
        hidden = torch.tanh(keys[:, None] + self.query_proj(query)[:, :, None])  # (B, Nq, Nk, d)
        logits = self.score(hidden).squeeze(-1)[:, None]  # (B, 1, Nq, Nk)
        weights, out = attend_values(logits, values, attention_logits_mask(mask, bias), self.dropout, self.training)
        return AttentionOutput(out, weights if need_weights else None)


def attend_values(
    logits: Tensor, values: Tensor, logits_mask: Tensor | None, dropout: float, training: bool
) -> tuple[Tensor, Tensor]:
    """Single-head softmax attention over unprojected values: ``logits`` (B, 1, Nq, Nk) with an SDPA-style
    ``logits_mask`` (bool or float) -> weights alpha (B, 1, Nq, Nk) (before dropout) and the attended values
    sum_k alpha_k v_k (B, Nq, Dv) of ``values`` (B, Nk, Dv); a query with no key left gets zeros."""
    weights = masked_softmax(apply_logits_mask(logits, logits_mask))  # (B, 1, Nq, Nk)
    used = F.dropout(weights, dropout, training)
    return weights, (used @ values[:, None]).squeeze(1)  # (B, Nq, Dv)
