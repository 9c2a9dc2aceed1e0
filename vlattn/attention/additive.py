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
from vlattn.attention.cache import KeyValueSource
from vlattn.attention.mha import apply_logits_mask, attention_logits_mask, masked_softmax


class AdditiveAttention(nn.Module):
    """``forward(query (B,Nq,Dq), key (B,Nk,Dk), value (B,Nk,Dk))`` -> ``out`` (B, Nq, Dk), weights
    (B, 1, Nq, Nk)."""

    @dataclass
    class Options:
        """Additive attention has no options of its own."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        sites=frozenset({Site.CROSS}), cacheable=False, heads=False, query_dim_differs=True
    )

    def __init__(self, dims: AttentionDims, options: Options | None = None) -> None:
        super().__init__()
        self.out_dim = dims.k_dim
        self.dropout = dims.dropout
        self.key_proj = nn.Linear(dims.k_dim, dims.d_model)  # W_va
        self.query_proj = nn.Linear(dims.q_dim, dims.d_model)  # W_ha
        self.score = nn.Linear(dims.d_model, 1)  # w_a

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
        keys, values = (
            self.project_key_value(key, value)
            if cache is None
            else cache.fetch(lambda: self.project_key_value(key, value))
        )  # (B, Nk, d), (B, Nk, Dk)
        hidden = torch.tanh(keys[:, None] + self.query_proj(query)[:, :, None])  # (B, Nq, Nk, d)
        logits = self.score(hidden).squeeze(-1)[:, None]  # (B, 1, Nq, Nk)
        weights = masked_softmax(apply_logits_mask(logits, attention_logits_mask(mask, bias)))  # (B, 1, Nq, Nk)
        used = F.dropout(weights, self.dropout, self.training)
        out = (used @ values[:, None]).squeeze(1)  # (B, Nq, Dk)
        return AttentionOutput(out, weights if need_weights else None)
