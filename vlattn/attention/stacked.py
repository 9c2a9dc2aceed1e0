"""Plain stacked attention (Fan & Zhou 2018, "Stacked Latent Attention for Multimodal Reasoning", Sec. 3.1-3.2,
Fig. 1; the stacking of Yang et al. 2016, "Stacked Attention Networks"): the baseline SLA is compared with.

    s_i^(t)     = sigma(W_v^(t) v_i + W_h^(t) h^(t))                     (Sec. 3.1: f_att = W_u s, hidden size m)
    alpha^(t)   = softmax_i(W_u^(t) s_i^(t)),   z^(t) = sum_i alpha_i^(t) v_i
    h^(t+1)     = z^(t),   h^(1) = the query,   out = z^(T)              (Sec. 3.2)

Every unit's latent map s^(t) reaches the output only through its softmax (all T softmaxes lie on one pathway,
Fig. 1), which is what makes the first units' gradients vanish (Sec. 4.1.4). The paper sets h^(t+1) = z^(t)
(Sec. 3.2); SAN adds the previous query (u^k = u^(k-1) + v~^k), which we do not.

Choices the paper leaves open, shared with :mod:`vlattn.attention.sla` so that the two differ only in the
latent pathway: sigma is the ``activation`` option (``relu``, the two-layer perceptron of the attention models
Sec. 3.1 cites [4]; or ``tanh``, Up-Down's additive attention); each unit has one bias (in W_v; biases in W_h
would only repeat it, and one in W_u cancels in the softmax). Unit 1 reads the query (``query_dim``), later
units the previous attended value (``key_dim``). ``d_model`` is m. The per-unit projections W_v^(t) v of an
image are computed once per image through a compute-once cache during decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from vlattn.attention.additive import attend_values
from vlattn.attention.base import AttentionContext, AttentionDims, AttentionOutput, Capabilities, Site
from vlattn.attention.cache import KeyValueSource, fetch_projections
from vlattn.attention.mha import attention_logits_mask
from vlattn.config import MAX_HEADS, bounded

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": torch.relu, "tanh": torch.tanh}


class AttentionUnit(nn.Module):
    """One attention layer f_att of Sec. 3.1: s_i = sigma(W_v v_i + W_h h [+ extra_i]), logits e_i = W_u s_i.

    :meth:`project_keys` is the per-image part W_v v (B, K, m); :meth:`forward` adds the queries' part and any
    ``extra`` pre-activation term (SLA's latent inputs) broadcastable to (B, Nq, K, m).
    """

    def __init__(self, key_dim: int, query_dim: int, hidden: int, activation: str) -> None:
        super().__init__()
        self.key_proj = nn.Linear(key_dim, hidden)  # W_v, with the unit's bias
        self.query_proj = nn.Linear(query_dim, hidden, bias=False)  # W_h
        self.score = nn.Linear(hidden, 1, bias=False)  # W_u (a bias would cancel in the softmax)
        self.activation = ACTIVATIONS[activation]

    def project_keys(self, key: Tensor) -> Tensor:
        """The per-image term W_v v: (B, K, Dk) -> (B, K, m)."""
        return self.key_proj(key)

    def forward(self, keys: Tensor, query: Tensor, extra: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``keys`` (B, K, m) from :meth:`project_keys`, ``query`` (B, Nq, Dq) -> latent map s (B, Nq, K, m) and
        logits (B, 1, Nq, K)."""
        pre = keys[:, None] + self.query_proj(query)[:, :, None]  # (B, Nq, K, m)
        if extra is not None:
            pre = pre + extra
        latent = self.activation(pre)  # (B, Nq, K, m)
        return latent, self.score(latent).squeeze(-1)[:, None]  # (B, Nq, K, m), (B, 1, Nq, K)


@dataclass
class StackTrace:
    """What a stack of units computed: ``latents`` s^(t) (B, Nq, K, m) and ``weights`` alpha^(t) (B, 1, Nq, K) of
    every unit t = 1..T (first to last), and the mechanism's output ``out`` (B, Nq, out_dim)."""

    latents: list[Tensor]
    weights: list[Tensor]
    out: Tensor


def stacked_keys(units: nn.ModuleList, key: Tensor) -> Tensor:
    """Every unit's per-image term, stacked: (B, K, Dk) -> (B, T, K, m)."""
    return torch.stack([unit.project_keys(key) for unit in units], dim=1)


class UnitStack(nn.Module):
    """What the stacks of units share: every unit's per-image keys, and ``forward`` = :meth:`trace` with the last
    unit's weights. Subclasses hold ``units`` and implement ``trace``."""

    units: nn.ModuleList

    def project_key_value(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Every unit's per-image term (B, T, Nk, m) and the values as they are (B, Nk, Dk)."""
        return stacked_keys(self.units, key), value

    def trace(
        self, query: Tensor, key: Tensor, value: Tensor, *, mask: Tensor | None = None, bias: Tensor | None = None,
        cache: KeyValueSource | None = None, context: AttentionContext | None = None,
    ) -> StackTrace:
        raise NotImplementedError

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
        """Attend ``query`` (B, Nq, Dq) over ``key``/``value`` (B, Nk, Dk) through T units; ``out`` (B, Nq, Dk),
        ``weights`` the last unit's (B, 1, Nq, Nk)."""
        trace = self.trace(query, key, value, mask=mask, bias=bias, cache=cache, context=context)
        return AttentionOutput(trace.out, trace.weights[-1] if need_weights else None)


class StackedAttention(UnitStack):
    """T stacked attention units, each unit's attended value the next unit's query (Sec. 3.2).

    ``forward(query (B,Nq,Dq), key (B,Nk,Dk), value (B,Nk,Dk))`` -> ``out`` (B, Nq, Dk) = z^(T); ``weights``
    (B, 1, Nq, Nk) are the last unit's; :meth:`trace` returns every unit's latent map and weights.
    """

    @dataclass
    class Options:
        """``units``: T, the number of stacked attention layers; ``activation``: sigma of every unit."""

        units: int = bounded(3, ge=1, le=MAX_HEADS)
        activation: Literal["relu", "tanh"] = "relu"

    capabilities: ClassVar[Capabilities] = Capabilities(
        sites=frozenset({Site.CROSS}), cacheable=False, heads=False, query_dim_differs=True
    )

    def __init__(self, dims: AttentionDims, options: Options | None = None) -> None:
        super().__init__()
        options = options or self.Options()
        self.out_dim = dims.k_dim
        self.dropout = dims.dropout
        self.units = nn.ModuleList(
            AttentionUnit(dims.k_dim, dims.q_dim if t == 0 else dims.k_dim, dims.d_model, options.activation)
            for t in range(options.units)
        )

    def trace(
        self, query: Tensor, key: Tensor, value: Tensor, *, mask: Tensor | None = None, bias: Tensor | None = None,
        cache: KeyValueSource | None = None, context: AttentionContext | None = None,
    ) -> StackTrace:
        """Run the stack; see :class:`StackTrace` (``context`` is not used)."""
        keys, values = fetch_projections(cache, lambda: self.project_key_value(key, value))  # (B,T,Nk,m), (B,Nk,Dk)
        logits_mask = attention_logits_mask(mask, bias)
        hidden, latents, weights = query, [], []
        for t, unit in enumerate(self.units):
            latent, logits = unit(keys[:, t], hidden)
            alpha, hidden = attend_values(logits, values, logits_mask, self.dropout, self.training)  # h^(t+1) = z^(t)
            latents.append(latent)
            weights.append(alpha)
        return StackTrace(latents, weights, hidden)
