"""Transformer encoder over detector regions (SAN encoder, NG-SAN Sec. 3.2, Fig. 1; M2 paper Sec. 3.1 without
memory): an input projection, then L post-LN layers of self-attention + feed-forward. No positions: regions
have no order (NG-SAN Sec. 3.2).

Layers are assembled from injected modules (attention of any registered mechanism, feed-forward of any
registered kind, the residual/norm wrappers), so mechanisms plug in without new layer classes. The encoder
receives the boxes and builds one :class:`~vlattn.attention.AttentionContext` per forward pass: the region
mask as the query mask and a :class:`~vlattn.layers.BoxGeometry` whose pairwise geometry is computed once and
shared by every layer.

The padding mask comes from ``region_mask`` (True = real region) and is applied to the keys of every layer.
``released_padding = R`` instead reproduces the released M2 code (and the LW-Transformer captioning code built on
it): its data loader zero-pads every image to exactly R = 50 regions, and the encoder derives the mask from
activations — a region is padding when its
projected features (after the input LayerNorm) sum to exactly zero. A LayerNorm output sums to ~0 while the
norm's bias is near its initial 0, so early in training rounding decides which rows (real ones included) are
masked; once the bias has trained, no sum is zero, nothing is masked and the zero rows are attended like
regions (their number therefore matters). The encoder zero-pads its input to R rows (more rows
are kept as they are) and ignores ``region_mask``; the option exists to run the released model exactly as it
was trained and evaluated.
The stack returns the output of *every* layer, (B, L, N, d), for decoders that attend to all of them (M2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlattn.attention import AttentionContext, Site
from vlattn.layers import BoxGeometry
from vlattn.layers.dropout import Dropout


@dataclass
class Memory:
    """An encoded set the decoder attends to: ``states`` (B, L, N, d), one entry per encoder layer (level),
    and ``mask`` (B, N) bool, True = real element."""

    states: Tensor
    mask: Tensor

    @cached_property
    def key_mask(self) -> Tensor | None:
        """``mask`` as attention takes it for these elements as keys, (B, 1, 1, N) bool; None when every element is
        real (attention then skips masking, which changes nothing; computed once, not at every decoding step)."""
        return None if bool(self.mask.all()) else self.mask[:, None, None, :]


class EncoderLayer(nn.Module):
    """x <- norm1(x, SelfAttention(x)); x <- norm2(x, FFN(x)); (B, N, d) -> (B, N, d).

    ``attn_norm``/``ffn_norm`` map (residual input, sub-layer output) to the layer output
    (:class:`~vlattn.layers.PostNorm` for the post-LN Transformer).
    """

    def __init__(self, attention: nn.Module, feed_forward: nn.Module, attn_norm: nn.Module, ffn_norm: nn.Module) -> None:
        super().__init__()
        self.self_attn = attention
        self.attn_norm = attn_norm
        self.ffn = feed_forward
        self.ffn_norm = ffn_norm

    def forward(
        self, x: Tensor, mask: Tensor | None, context: AttentionContext, bias: Tensor | None = None,
        memory: Tensor | None = None,
    ) -> Tensor:
        """``x`` (B, N, d), ``mask`` bool (B, 1, 1, N) True = real key, ``bias`` (B, H|1, N, N) or None.

        ``memory`` (B|1, M, d): keys/values other than ``x`` (CATT's cross-sample stream: the queries of the sample
        over the dictionary or the cross-sample states); the residual is over the queries ``x`` either way."""
        source = x if memory is None else memory
        attended = self.self_attn(x, source, source, mask=mask, bias=bias, context=context).out
        x = self.attn_norm(x, attended)
        return self.ffn_norm(x, self.ffn(x))


class TransformerEncoder(nn.Module):
    """Region encoder: ``forward(features (B,N,D), boxes (B,N,4), region_mask (B,N))`` -> :class:`Memory`
    holding all layer outputs (B, L, N, d)."""

    def __init__(
        self, input_proj: nn.Module, layers: Sequence[nn.Module], box_encoding: nn.Module | None = None,
        released_padding: int | None = None,
    ) -> None:
        super().__init__()
        self.input_proj = input_proj
        self.layers = nn.ModuleList(layers)
        self.box_encoding = box_encoding
        self.released_padding = released_padding

    def forward(self, features: Tensor, boxes: Tensor, region_mask: Tensor, bias: Tensor | None = None) -> Memory:
        """``features`` (B, N, D), ``boxes`` (B, N, 4) normalised x1y1x2y2, ``region_mask`` bool (B, N)
        True = real (replaced by the released rule with ``released_padding``); ``bias`` added to every
        layer's self-attention logits. With a ``box_encoding`` module (boxes (B, N, 4) -> (B, N, d)), its
        output is added to the projected features (absolute geometry). The returned memory has
        max(N, ``released_padding``) rows."""
        if self.released_padding is not None:
            extra = max(0, self.released_padding - features.shape[1])
            features, boxes = F.pad(features, (0, 0, 0, extra)), F.pad(boxes, (0, 0, 0, extra))  # (B, R, .)
        x = self.input_proj(features)  # (B, N, d)
        if self.released_padding is not None:
            region_mask = x.sum(dim=-1) != 0  # (B, R)
        if self.box_encoding is not None:
            x = x + self.box_encoding(boxes)
        mask = region_mask[:, None, None, :]  # (B, 1, 1, N): padded regions are never attended to
        context = AttentionContext(Site.ENCODER_SELF, query_mask=region_mask, geometry=BoxGeometry(boxes, region_mask))
        outputs = []
        for layer in self.layers:
            x = layer(x, mask, context, bias)
            outputs.append(x)
        states = torch.stack(outputs, dim=1) if outputs else x[:, None]  # (B, L, N, d)
        return Memory(states, region_mask)


def region_projection(feature_dim: int, d_model: int, dropout: float) -> nn.Sequential:
    """The input projection of the region encoder: Linear(D->d) + ReLU + dropout + LayerNorm (M2 Sec. 3.1)."""
    return nn.Sequential(nn.Linear(feature_dim, d_model), nn.ReLU(), Dropout(dropout), nn.LayerNorm(d_model))
