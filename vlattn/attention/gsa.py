"""Geometry-aware Self-Attention, GSA (Guo et al. 2020, "Normalized and Geometry-Aware Self-Attention Network
for Image Captioning", Sec. 4.2, Eq. 8-13; variants of Table 4):

    f_ij = relative geometry of boxes i and j                                 (Eq. 8, vlattn.layers.BoxGeometry)
    G_ij = ReLU(FC(f_ij)),  G in R^{N x N x d_g}                              (Eq. 9)
    E    = Q K^T / sqrt(d_k) + phi(Q', K', G)                                  (Eq. 10)
    phi1_ij = ReLU(w_g^T G_ij)                  content-independent            (Eq. 11)
    phi2_ij = Q'_i^T G_ij                       query-dependent (the default)  (Eq. 12)
    phi3_ij = K'_j^T G_ij                       key-dependent                  (Eq. 13)

Sec. 5.1 ("Implementation details") says the default is "the query-dependent variant (phi^1)", but phi^1 is the
content-independent variant of Eq. 11; the words and Tables 4 and 6 (query-dependent the best variant, the one
NG-SAN uses) agree on the query-dependent one, so the default follows them: phi2 of Eq. 12
(``phi: [query_dependent]``), not the symbol.

with geometric queries/keys Q' = X W_Q' + b, K' = X W_K' + b "computed in the same way as Q, K" (Xavier-uniform
weights, zero biases, like the content projections). The bias enters the logits of every head before the
softmax, alongside the key mask, so it is computed here (from the layer's own input X) rather than passed in
as a precomputed ``bias``. ``phi`` may list several variants; their sum is used (Sec. 4.2: "either used
individually or combined").

Choices the paper leaves open, documented here:

- **Per-head projections.** Each head h has its own geometric query Q'_h (and key K'_h, and content weight
  w_g^h) of size d_g, so W_Q' is d x (H d_g); the geometry G_ij of Eq. 9 (one FC 4 -> d_g with bias, then ReLU)
  is shared by the heads of a layer, as Eq. 9 gives it no head axis. Each layer has its own FC.
- **d_g** (option ``d_g``) defaults to d_k = d / H (64 at d = 512, 8 heads), so W_Q' is d x d.
- **No scaling of phi.** Eq. 12-13 are plain dot products; the paper's footnote omits the 1/sqrt(d) scaling of
  QK^T only "for simplicity", and nothing says phi is scaled, so it is not.
- Per layer the parameters are: FC 4 x d_g + d_g; w_g: H x d_g (content-independent, no bias, as Eq. 11);
  W_Q' / W_K': d x H d_g + H d_g each (query-/key-dependent). With d = 512, 8 heads, d_g = 64:
  832 per layer for phi1 and 262,976 for phi2 or phi3 (see benchmarks/PARAMETERS.md, "NG-SAN parameters").
- f_ij is computed once per image (:class:`~vlattn.layers.BoxGeometry`, shared through the context by every
  layer) with the clamps documented there.
- **Direction.** Eq. 8 uses |x_i - x_j| and |y_i - y_j|, so GSA cannot tell left from right or above from
  below (a mirrored layout gives the same bias). Option ``geometry: signed`` (not in the paper) uses
  :attr:`~vlattn.layers.BoxGeometry.relative_signed`, which keeps the offsets' signs; ``paper`` (default) is
  Eq. 8.

Encoder self-attention with boxes only: the capabilities declare it and the builders refuse other sites and
sites that pass no geometry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from vlattn.attention.base import AttentionContext, AttentionDims, Capabilities, Site
from vlattn.attention.mha import MultiHeadAttention
from vlattn.config import MAX_WIDTH, bounded
from vlattn.errors import ConfigError

Phi = Literal["content_independent", "query_dependent", "key_dependent"]
GEOMETRY_FEATURES = 4  # the four entries of f_ij (Eq. 8)
RELATIVE_GEOMETRY = {"paper": "relative", "signed": "relative_signed"}  # option -> BoxGeometry attribute


def geometric_projection(d_model: int, width: int) -> nn.Linear:
    """X -> Q' or K' (B, N, width), initialised like the content projections (Xavier-uniform, zero bias)."""
    linear = nn.Linear(d_model, width)
    nn.init.xavier_uniform_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


class GeometricBias(nn.Module):
    """phi of Eq. 10 for every head: ``forward(query (B,Nq,D), key (B,Nk,D), relative (B,Nq,Nk,4))`` ->
    (B, H, Nq, Nk), the sum of the requested variants."""

    def __init__(self, d_model: int, num_heads: int, d_g: int, phi: list[str]) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.d_g = d_g
        self.geometry_fc = nn.Linear(GEOMETRY_FEATURES, d_g)  # Eq. 9
        self.content_weight = nn.Linear(d_g, num_heads, bias=False) if "content_independent" in phi else None  # w_g
        self.query_proj = geometric_projection(d_model, num_heads * d_g) if "query_dependent" in phi else None  # W_Q'
        self.key_proj = geometric_projection(d_model, num_heads * d_g) if "key_dependent" in phi else None  # W_K'

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, N, H d_g) -> (B, H, N, d_g)."""
        return x.unflatten(-1, (self.num_heads, self.d_g)).transpose(1, 2)

    def forward(self, query: Tensor, key: Tensor, relative: Tensor) -> Tensor:
        geometry = self.geometry_fc(relative).relu()  # G (B, Nq, Nk, d_g), Eq. 9
        terms = []
        if self.content_weight is not None:  # Eq. 11
            terms.append(self.content_weight(geometry).relu().permute(0, 3, 1, 2))  # (B, H, Nq, Nk)
        if self.query_proj is not None:  # Eq. 12: Q'_i . G_ij
            terms.append(torch.einsum("bhid,bijd->bhij", self.split_heads(self.query_proj(query)), geometry))
        if self.key_proj is not None:  # Eq. 13: K'_j . G_ij
            terms.append(torch.einsum("bhjd,bijd->bhij", self.split_heads(self.key_proj(key)), geometry))
        return sum(terms[1:], start=terms[0])  # (B, H, Nq, Nk)


class GeometryAwareSelfAttention(MultiHeadAttention):
    """Multi-head self-attention with the geometric bias of Eq. 10 added to the logits:
    ``forward(x (B,N,D), x, x, context=AttentionContext(Site.ENCODER_SELF, geometry=BoxGeometry(boxes)))``
    -> ``out`` (B,N,D)."""

    @dataclass
    class Options:
        """``phi``: the variants of the geometric bias, summed (Eq. 11-13); ``d_g``: the width of G and of each
        head's geometric query/key (None: d / H); ``geometry``: Eq. 8 (``paper``) or its direction-keeping
        variant (``signed``)."""

        phi: list[Phi] = field(default_factory=lambda: ["query_dependent"])
        d_g: int | None = bounded(None, ge=1, le=MAX_WIDTH)
        geometry: Literal["paper", "signed"] = "paper"

        def check(self, where: str) -> None:
            if not self.phi or len(set(self.phi)) != len(self.phi):
                raise ConfigError(f"config key {where}.phi: give each variant once, at least one, got {self.phi!r}")
            if self.d_g is not None and self.d_g < 1:
                raise ConfigError(f"config key {where}.d_g: must be >= 1, got {self.d_g}")

    capabilities: ClassVar[Capabilities] = Capabilities(
        sites=frozenset({Site.ENCODER_SELF}), cacheable=False, needs_geometry=True
    )

    def __init__(self, dims: AttentionDims, options: Options | None = None) -> None:
        super().__init__(dims, options)
        options = options or self.Options()
        d_g = options.d_g if options.d_g is not None else self.d_head
        self.geometric_bias = GeometricBias(dims.d_model, dims.num_heads, d_g, list(options.phi))
        self.relative_geometry = RELATIVE_GEOMETRY[options.geometry]

    def logit_bias(self, query: Tensor, key: Tensor, context: AttentionContext | None) -> Tensor:
        """phi (B, H, Nq, Nk) from the inputs and the context's box geometry."""
        if context is None or context.geometry is None:
            raise ValueError("geometry-aware attention needs box geometry in the attention context")
        return self.geometric_bias(query, key, getattr(context.geometry, self.relative_geometry))
