"""Normalized Self-Attention, NSA (Guo et al. 2020, "Normalized and Geometry-Aware Self-Attention Network for
Image Captioning", Sec. 4.1, Eq. 5-7; variants of Tables 2 and 3):

    Q_hat = IN(Q),   Z = softmax(Q_hat K^T / sqrt(d_k)) V                                      (Eq. 7)

where IN normalises every channel of the projected queries Q = X W_Q over the regions of one image (Eq. 6,
instance normalisation of the (B, N, d) queries; the statistics of the d channels do not depend on how they
are later split into heads). Statistics are *masked*: only real regions count (the context's ``query_mask``,
which at an encoder self-attention site is also the key mask), so padding never changes a real output.

Options (:class:`NormalizedSelfAttention.Options`):

- ``norm``: ``instance`` (Eq. 6, default), ``batch`` or ``layer`` (Table 2's BN and LN rows), see
  :mod:`vlattn.layers.masked_norm`;
- ``normalize``: ``query`` (default, Sec. 5.1 "only normalize the query"), ``key`` or ``both``
  (Table 3; the keys are normalised over the regions the same way, K_hat = IN(K));
- ``affine``: the channel-wise gamma/beta after normalising (Table 2 "IN" vs "IN w/o gamma, beta"; off by
  default, Sec. 5.1);
- ``eps``: added to the variance, 1e-5 (the paper gives no value).

Choices the paper leaves open, documented here:

- The projection bias of a normalised Q (or K) is dropped when the normaliser subtracts a per-channel mean
  (IN, BN): the mean subtraction cancels it exactly, so it could never receive a gradient. This removes
  d = 512 parameters per normalised projection per layer (N-SAN 4 layers: 2,048 fewer than SAN; Table 1
  prints equal counts at 0.1M precision). With LN the bias is kept (LN does not cancel it).
- Encoder self-attention only (Sec. 4.3: the decoder is autoregressive, and IN statistics over a prefix of
  length 1 are meaningless), which the capabilities declare; the builders refuse other placements.
- Without a context (or without its query mask) every region counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from torch import Tensor, nn

from vlattn.attention.base import AttentionContext, AttentionDims, Capabilities, Site
from vlattn.attention.mha import MultiHeadAttention
from vlattn.config import bounded
from vlattn.layers.masked_norm import MASKED_NORMS, MaskedNorm


def query_mask_of(context: AttentionContext | None) -> Tensor | None:
    """The (B, N) real-region mask of the context, or None (every region real)."""
    return None if context is None else context.query_mask


class NormalizedSelfAttention(MultiHeadAttention):
    """Multi-head self-attention with normalised queries (and/or keys), Eq. 7:
    ``forward(x (B,N,D), x, x, context=AttentionContext(Site.ENCODER_SELF, query_mask))`` -> ``out`` (B,N,D)."""

    @dataclass
    class Options:
        """See the module docstring: ``norm``, ``normalize``, ``affine``, ``eps``."""

        norm: Literal["instance", "batch", "layer"] = "instance"
        normalize: Literal["query", "key", "both"] = "query"
        affine: bool = False
        eps: float = bounded(1e-5, gt=0.0)

    capabilities: ClassVar[Capabilities] = Capabilities(sites=frozenset({Site.ENCODER_SELF}), cacheable=False)

    def __init__(self, dims: AttentionDims, options: Options | None = None) -> None:
        super().__init__(dims, options)
        options = options or self.Options()
        self.query_norm = self.normaliser(options, self.q_proj) if options.normalize in ("query", "both") else None
        self.key_norm = self.normaliser(options, self.k_proj) if options.normalize in ("key", "both") else None

    def normaliser(self, options: Options, projection: nn.Linear) -> MaskedNorm:
        """The normaliser of one projection's output; drops the projection's bias if it would cancel it."""
        norm = MASKED_NORMS[options.norm](self.out_dim, options.eps, options.affine)
        if norm.centres_channels:
            projection.bias = None
        return norm

    def project_query(self, query: Tensor, context: AttentionContext | None) -> Tensor:
        """Q_hat = Norm(X W_Q) over the real regions, split into heads: (B, H, Nq, d_k)."""
        q = self.q_proj(query)  # (B, Nq, D)
        if self.query_norm is not None:
            q = self.query_norm(q, query_mask_of(context))
        return self.split_heads(q)

    def project_key_value(self, key: Tensor, value: Tensor, context: AttentionContext | None) -> tuple[Tensor, Tensor]:
        """K (or K_hat = Norm(X W_K) over the real regions) and V, (B, H, Nk, d_k) each."""
        k = self.k_proj(key)  # (B, Nk, D)
        if self.key_norm is not None:
            k = self.key_norm(k, query_mask_of(context))
        return self.split_heads(k), self.split_heads(self.v_proj(value))
