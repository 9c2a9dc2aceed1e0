"""Stacked Latent Attention, SLA (Fan & Zhou 2018, "Stacked Latent Attention for Multimodal Reasoning",
Sec. 3.3, Fig. 2; the positional bias: Sec. 3.3 last paragraph, Sec. 3.4, Table 2, Fig. 8):

    z_i^(0)   = [v_i, b_pos,i(h)]                                         (positional bias bootstrapped from h)
    s_i^(t)   = sigma(W_v^(t) v_i + W_h^(t) h + W_z^(t) z_i^(t-1))        (f_SLA^(t) = W_u^(t) s^(t), t = 1..T)
    alpha^(t) = softmax_i(W_u^(t) s_i^(t)),   a^(t) = sum_k alpha_k^(t) v_k
    z_i^(t)   = [s_i^(t), a^(t)]
    out       = pool_i(W_o z_i^(T) + b_o)                                  (1x1 convolution, spatial pooling)

The main pathway z^(0) -> s^(1) -> z^(1) -> ... -> z^(T) -> out is a chain of position-wise (1x1 convolutional)
maps; each unit's softmax sits on a side branch (the unit G of Fig. 2) whose result a^(t) re-enters the
pathway, so gradients reach the first unit without passing through a softmax (Sec. 3.3, Sec. 4.1.4). The
plain stacked attention it replaces is :mod:`vlattn.attention.stacked`.

Captioning: the paper adds SLA to ReviewNet (Yang et al. 2016, its [24]; Sec. 4.2: "we use the same framework as
used in [24] ... The only change we make to this model is to replace the traditional attention mechanism with our
SLA model with T = 3"; Table 3: ReviewNet 0.886 -> 0.908 CIDEr). vlattn has no ReviewNet: its captioning presets
put SLA at the Up-Down captioner's top-down site instead (``vlattn/presets/updown-sla.yaml``), so the base model differs
from the paper's and Table 3's figures are not the comparison to expect.

No official code exists; every choice the paper leaves open, and ours:

1. sigma: the ``activation`` option, ``relu`` by default (the two-layer perceptron of the attention models
   Sec. 3.1 cites [4], and a "convolutional pathway"), or ``tanh`` (Up-Down's additive attention).
2. W_z^(t) is written R^{n^(t), m} but acts on z^(t-1), which has n^(t-1) channels: m + D for t > 1 (s and a),
   D + P for t = 1 (v and b_pos). We size it by its input. Since a^(t-1) is the same at every position,
   W_z z_i^(t-1) = W_zs s_i^(t-1) + W_za a^(t-1) is computed with the a-term once per query (the same function).
3. Unit 1 sees v twice (W_v^(1) v_i and the v channels of W_z^(1) z_i^(0)), literally as Sec. 3.3 defines
   z^(0) = [v, b_pos]. Both are kept (the parameter count follows the formulas); they are computed once per image.
4. One bias per unit (in W_v): biases in W_h and W_z would only repeat it, and one in W_u cancels in the softmax.
5. The hidden input h is the same for every unit (Fig. 2: one h); the twin-stream VQA model
   (:mod:`vlattn.models.twin_stream`) feeds each unit the other stream's attended value instead.
6. Positional bias ("feed the first hidden state h into a fully differentiable model", Sec. 3.3; "one fully
   connected layer" on the question state, Sec. 3.4): one linear layer maps h to the coefficients U(h) (P x E)
   of a linear function of each position's encoding e_i, b_pos,i = U(h) e_i (P = ``bias_channels``, one
   heatmap in Fig. 8). ``position: grid`` — a fixed k x k grid (the paper's 14 x 14 ResNet features,
   ``grid_cells`` = k^2 keys): e_i is one-hot, so b_pos is exactly FC(h) reshaped to one value per cell.
   ``position: boxes`` — detector regions have no fixed cell per index, so e_i are the region's normalised
   box channels (x1, y1, x2, y2, area) from the context's geometry: "what is in the sky" can still raise every
   region near the top. ``position: none`` — z^(0) = v (the Table 2 ablation without the bias). Sec. 4.1.4 calls
   the map "non-linear": ours is linear and meets sigma inside s^(1).
7. Output: "at the end of the attention chain, a pooling layer is used to summarize information on the spatial
   domain" (Sec. 3.3), and the twin-stream model feeds each stream's output "through a separate convolutional and
   pooling layer" (Sec. 3.4). We apply a 1x1 convolution W_o from
   the m + D channels of z^(T) to D, then ``pooling`` (mean, the default, or max) over the real positions, so
   the output has the values' size like every mechanism of the registry ("a direct replacement", Sec. 1).
   With mean pooling it is computed as W_o applied to the pooled z^(T) (the same value, K times cheaper).
8. Masks and biases follow the shared contract with a single head; a masked key (or one with a -inf bias) is
   left out of every unit's softmax and of the pooling. ``bias`` is added to every unit's logits; dropout
   (``dims.dropout``) applies to every unit's weights. ``d_model`` is the hidden size m; the per-unit
   projections of an image (W_v^(t) v, and W_z^(1)'s v part) are computed once per image through a
   compute-once cache during decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from vlattn.attention.additive import attend_values
from vlattn.attention.base import AttentionContext, AttentionDims, Capabilities, Site
from vlattn.attention.cache import KeyValueSource, fetch_projections
from vlattn.attention.mha import attention_logits_mask
from vlattn.attention.stacked import AttentionUnit, StackTrace, UnitStack
from vlattn.config import MAX_HEADS, MAX_LENGTH, bounded
from vlattn.errors import ConfigError
from vlattn.layers.boxes import BOX_CHANNELS, box_channels
from vlattn.layers.pooling import masked_max, masked_mean


@dataclass
class Latent:
    """z^(t) without materialising the concatenation: the per-position channels ``positions`` (B, Nq, K, P)
    (s^(t), or b_pos for t = 0; None without a bias) and the ``summary`` a^(t) (B, Nq, D) shared by every position
    (None for t = 0, whose v channels are carried by the keys)."""

    positions: Tensor | None
    summary: Tensor | None


class LatentUnit(AttentionUnit):
    """f_SLA^(t): s_i = sigma(W_v v_i + W_h h + W_z z_i^(t-1)) with W_z split as in the module docstring (2, 3).

    ``position_dim``: channels of z^(t-1)'s per-position part (m, or P for t = 1; 0 = none); ``summary_dim``: of its
    shared part (D for t > 1, 0 for t = 1); ``latent_keys``: z^(t-1) also holds v (t = 1).
    """

    def __init__(self, key_dim: int, query_dim: int, hidden: int, activation: str, *, position_dim: int,
                 summary_dim: int, latent_keys: bool) -> None:
        super().__init__(key_dim, query_dim, hidden, activation)
        self.key_latent_proj = nn.Linear(key_dim, hidden, bias=False) if latent_keys else None  # W_z^(1) on v
        self.position_proj = nn.Linear(position_dim, hidden, bias=False) if position_dim else None  # W_zs / W_zb
        self.summary_proj = nn.Linear(summary_dim, hidden, bias=False) if summary_dim else None  # W_za

    def project_keys(self, key: Tensor) -> Tensor:
        """The per-image terms W_v v (+ W_z^(1)'s v part): (B, K, Dk) -> (B, K, m)."""
        keys = self.key_proj(key)
        return keys if self.key_latent_proj is None else keys + self.key_latent_proj(key)

    def forward(self, keys: Tensor, query: Tensor, latent: Latent) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """``keys`` (B, K, m), ``query`` (B, Nq, Dq), ``latent`` z^(t-1) -> s^(t) (B, Nq, K, m), logits (B, 1, Nq, K)."""
        extra = None if self.position_proj is None else self.position_proj(latent.positions)  # (B, Nq, K, m)
        if self.summary_proj is not None:
            shared = self.summary_proj(latent.summary)[:, :, None]  # (B, Nq, 1, m)
            extra = shared if extra is None else extra + shared
        return super().forward(keys, query, extra)


def latent_units(key_dim: int, query_dim: int, hidden: int, activation: str, bias_dim: int, count: int) -> nn.ModuleList:
    """T = ``count`` SLA units: the first reads z^(0) = [v, b_pos] (``bias_dim`` = P, 0 without a bias), the
    others z^(t-1) = [s^(t-1), a^(t-1)]."""
    return nn.ModuleList(
        LatentUnit(key_dim, query_dim, hidden, activation, position_dim=bias_dim if t == 0 else hidden,
                   summary_dim=0 if t == 0 else key_dim, latent_keys=t == 0)
        for t in range(count)
    )


def latent_step(
    unit: LatentUnit, keys: Tensor, values: Tensor, query: Tensor, latent: Latent, logits_mask: Tensor | None,
    dropout: float, training: bool,
) -> tuple[Tensor, Latent]:
    """One SLA unit: weights alpha^(t) (B, 1, Nq, K) and z^(t) = [s^(t), a^(t)] from ``keys`` (B, K, m),
    ``values`` (B, K, D), the hidden input ``query`` (B, Nq, Dq) and z^(t-1)."""
    latent_map, logits = unit(keys, query, latent)  # (B, Nq, K, m), (B, 1, Nq, K)
    weights, attended = attend_values(logits, values, logits_mask, dropout, training)  # (B, 1, Nq, K), (B, Nq, D)
    return weights, Latent(latent_map, attended)


class PositionalBias(nn.Module):
    """b_pos,i = U(h) e_i (choice 6): ``forward(query (B,Nq,Dq), key (B,K,Dk), context)`` -> (B, Nq, K, P).
    Subclasses define the position encoding e (B|1, K, E)."""

    def __init__(self, query_dim: int, channels: int, encoding_dim: int) -> None:
        super().__init__()
        self.channels = channels
        self.proj = nn.Linear(query_dim, channels * encoding_dim)  # the one fully connected layer on h

    def encode(self, key: Tensor, context: AttentionContext | None) -> Tensor:
        """The position encodings e (B or 1, K, E) of the keys."""
        raise NotImplementedError

    def forward(self, query: Tensor, key: Tensor, context: AttentionContext | None) -> Tensor:
        encoding = self.encode(key, context).to(query.dtype)  # (B|1, K, E)
        coefficients = self.proj(query).unflatten(-1, (self.channels, encoding.shape[-1]))  # (B, Nq, P, E)
        return torch.einsum("bqpe,bke->bqkp", coefficients, encoding.expand(query.shape[0], -1, -1))


class BoxPositionalBias(PositionalBias):
    """Positions are the keys' normalised boxes (x1, y1, x2, y2, area), read from ``context.geometry``."""

    def __init__(self, query_dim: int, channels: int) -> None:
        super().__init__(query_dim, channels, BOX_CHANNELS)

    def encode(self, key: Tensor, context: AttentionContext | None) -> Tensor:
        if context is None or context.geometry is None:
            raise ValueError("attention 'sla' with position 'boxes' needs the keys' boxes in context.geometry")
        return box_channels(context.geometry.boxes)  # (B, K, 5)


class GridPositionalBias(PositionalBias):
    """Positions are the ``cells`` cells of a fixed grid, key i being cell i: e_i is one-hot."""

    def __init__(self, query_dim: int, channels: int, cells: int) -> None:
        super().__init__(query_dim, channels, cells)
        self.cells = cells

    def encode(self, key: Tensor, context: AttentionContext | None) -> Tensor:
        if key.shape[1] != self.cells:
            raise ConfigError(
                f"attention 'sla' with position 'grid' expects {self.cells} keys (options.grid_cells), got {key.shape[1]}"
            )
        return torch.eye(self.cells, device=key.device)[None]  # (1, K, K)


# ``position`` option -> (query_dim, channels P, grid cells) -> the positional-bias module (None: z^(0) = v)
POSITIONAL_BIAS: dict[str, Callable[[int, int, int], PositionalBias | None]] = {
    "boxes": lambda query_dim, channels, cells: BoxPositionalBias(query_dim, channels),
    "grid": GridPositionalBias,
    "none": lambda query_dim, channels, cells: None,
}


def valid_positions(logits_mask: Tensor | None, queries: int, keys: int) -> Tensor | None:
    """The keys each query may use, (B, Nq, K) bool, from an SDPA-style mask/bias (a -inf bias excludes a key);
    None when every key counts."""
    if logits_mask is None:
        return None
    valid = logits_mask if logits_mask.dtype == torch.bool else ~torch.isneginf(logits_mask)
    batch = valid.shape[0] if valid.dim() == 4 else 1
    return valid.expand(batch, 1, queries, keys)[:, 0]  # (B, Nq, K)


def mean_pool(latent: Tensor, valid: Tensor | None, project: nn.Module) -> Tensor:
    """project(mean over the valid positions of ``latent`` (B, Nq, K, C)) -> (B, Nq, D): W_o commutes with the mean."""
    return project(masked_mean(latent, valid))


def max_pool(latent: Tensor, valid: Tensor | None, project: nn.Module) -> Tensor:
    """Maximum over the valid positions of project(``latent``) (B, Nq, K, C) -> (B, Nq, D)."""
    return masked_max(project(latent), valid)


POOLING: dict[str, Callable[[Tensor, Tensor | None, nn.Module], Tensor]] = {"mean": mean_pool, "max": max_pool}


class LatentReadout(nn.Module):
    """out = pool_i(W_o z_i^(T) + b_o) with z_i^(T) = [s_i^(T), a^(T)] (choice 7): (B, Nq, out_dim)."""

    def __init__(self, hidden: int, summary_dim: int, out_dim: int, pooling: str) -> None:
        super().__init__()
        self.latent_proj = nn.Linear(hidden, out_dim, bias=False)  # W_o on the s^(T) channels
        self.summary_proj = nn.Linear(summary_dim, out_dim)  # W_o on the a^(T) channels, and b_o
        self.pool = POOLING[pooling]

    def forward(self, latent: Latent, valid: Tensor | None) -> Tensor:
        """``latent`` z^(T), ``valid`` (B, Nq, K) or None -> (B, Nq, out_dim)."""
        return self.pool(latent.positions, valid, self.latent_proj) + self.summary_proj(latent.summary)


class StackedLatentAttention(UnitStack):
    """T SLA units and the pooled readout (see the module docstring).

    ``forward(query (B,Nq,Dq), key (B,Nk,Dk), value (B,Nk,Dk), context=...)`` -> ``out`` (B, Nq, Dk); ``weights``
    (B, 1, Nq, Nk) are the last unit's; :meth:`trace` returns every unit's latent map and weights.
    """

    @dataclass
    class Options:
        """``units``: T; ``activation``: sigma; ``position``: the positional bias (``boxes``, ``grid``, ``none``)
        with ``bias_channels`` P and, for ``grid``, ``grid_cells`` = k^2 keys; ``pooling``: ``mean`` or ``max``."""

        units: int = bounded(3, ge=1, le=MAX_HEADS)
        activation: Literal["relu", "tanh"] = "relu"
        position: Literal["boxes", "grid", "none"] = "boxes"
        bias_channels: int = bounded(1, ge=1, le=MAX_HEADS)
        grid_cells: int = bounded(196, ge=1, le=MAX_LENGTH)
        pooling: Literal["mean", "max"] = "mean"

    capabilities: ClassVar[Capabilities] = Capabilities(
        sites=frozenset({Site.CROSS}), cacheable=False, needs_geometry=True, heads=False, query_dim_differs=True
    )

    @classmethod
    def capabilities_for(cls, options: Options) -> Capabilities:
        """Only ``position: boxes`` reads the context's geometry; ``grid`` and ``none`` place like ``stacked``
        (e.g. at a Transformer decoder's or MCAN's cross sites, which pass no boxes)."""
        return replace(cls.capabilities, needs_geometry=options.position == "boxes")

    def __init__(self, dims: AttentionDims, options: Options | None = None) -> None:
        super().__init__()
        options = options or self.Options()
        self.out_dim = dims.k_dim
        self.dropout = dims.dropout
        self.positional = POSITIONAL_BIAS[options.position](dims.q_dim, options.bias_channels, options.grid_cells)
        bias_dim = 0 if self.positional is None else options.bias_channels
        self.units = latent_units(dims.k_dim, dims.q_dim, dims.d_model, options.activation, bias_dim, options.units)
        self.readout = LatentReadout(dims.d_model, dims.k_dim, dims.k_dim, options.pooling)

    def run_units(
        self, keys: Tensor, values: Tensor, query: Tensor, bias_pos: Tensor | None, logits_mask: Tensor | None
    ) -> StackTrace:
        """The stack from z^(0) = [v, ``bias_pos`` (B, Nq, K, P) or None]: ``keys`` (B, T, K, m) from
        :meth:`project_key_value`, ``values`` (B, K, D), ``query`` h (B, Nq, Dq)."""
        latent, latents, weights = Latent(bias_pos, None), [], []
        for t, unit in enumerate(self.units):
            alpha, latent = latent_step(unit, keys[:, t], values, query, latent, logits_mask, self.dropout, self.training)
            latents.append(latent.positions)
            weights.append(alpha)
        valid = valid_positions(logits_mask, query.shape[1], keys.shape[2])
        return StackTrace(latents, weights, self.readout(latent, valid))

    def trace(
        self, query: Tensor, key: Tensor, value: Tensor, *, mask: Tensor | None = None, bias: Tensor | None = None,
        cache: KeyValueSource | None = None, context: AttentionContext | None = None,
    ) -> StackTrace:
        """Run the positional bias and the stack; see :class:`~vlattn.attention.stacked.StackTrace`."""
        keys, values = fetch_projections(cache, lambda: self.project_key_value(key, value))  # (B,T,Nk,m), (B,Nk,Dk)
        bias_pos = None if self.positional is None else self.positional(query, key, context)  # (B, Nq, Nk, P)
        return self.run_units(keys, values, query, bias_pos, attention_logits_mask(mask, bias))
