"""Transformer caption decoder (Vaswani et al. 2017 Sec. 3.1; SAN decoder, NG-SAN Sec. 3.2; M2 Sec. 3.2
without meshing): word embedding + sinusoidal positions, then L post-LN layers of masked self-attention,
a cross-attention *site* over the encoded memories and a feed-forward; a linear output layer.

Every part of a layer is injected. A cross-attention site maps ``(x (B,T,d), memories, cache) -> (B,T,d)``
including its residual + norm, where ``memories`` maps names to :class:`~vlattn.models.encoder.Memory`
(``"regions"`` for the region encoder; two-stream models add more); ``new_cache()`` returns the cache object(s)
the site needs. :class:`CrossAttentionSite` attends to one level of one memory; M2's meshed cross-attention
over all encoder levels is another site.

Decoding rows and images: the memories (and the sites' caches) hold one row per *image*, while the decoder's
inputs may hold several rows per image (the beams or samples of an image, rows grouped image by image: R = B g).
A site attends with the g T queries of an image as one block against that image's keys (:func:`per_image`),
so nothing per image is ever copied per beam.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from vlattn.attention import AttentionContext, KeyValueSource, KVCache, Site, StaticKVCache, site_cache
from vlattn.attention.cache import reorder_state
from vlattn.layers.dropout import Dropout
from vlattn.models.encoder import Memory

Memories = Mapping[str, Memory]
CROSS_CONTEXT = AttentionContext(Site.CROSS)
DECODER_SELF_CONTEXT = AttentionContext(Site.DECODER_SELF)


def causal_mask(length: int, start: int, device: torch.device) -> Tensor | None:
    """Bool (length, start + length): query i (position start + i) attends keys 0..start + i.

    A single query at the end of the sequence attends to everything, so no mask (None) is needed.
    """
    if length == 1:
        return None
    keys = torch.arange(start + length, device=device)
    queries = torch.arange(start, start + length, device=device)
    return keys[None, :] <= queries[:, None]  # (T, start + T)


def per_image(x: Tensor, images: int) -> Tensor:
    """Decoding rows grouped by image, (R, T, d) with R = ``images`` g -> one block of queries per image
    (images, g T, d) (a view)."""
    if x.shape[0] % images:
        raise ValueError(f"{x.shape[0]} decoding rows do not split evenly over {images} images")
    return x.reshape(images, -1, x.shape[-1])


def per_row(x: Tensor, rows: Tensor) -> Tensor:
    """The inverse of :func:`per_image`: (images, g T, d') -> the layout of ``rows`` (R, T, ·), (R, T, d')."""
    return x.reshape(*rows.shape[:-1], x.shape[-1])


def regroup(index: Tensor, images: int, group: int) -> int:
    """The rows per image g' after reordering decoding rows (``images`` g of them, grouped image by image) by
    ``index`` (B g',): a ``ValueError`` unless row r of the result continues a row of its own image
    (``index[r] // g == r // g'``; images are never permuted or copied)."""
    if index.shape[0] % images:
        raise ValueError(f"reorder: {index.shape[0]} rows do not split evenly over {images} images")
    new_group = index.shape[0] // images
    expected = torch.arange(images, device=index.device).repeat_interleave(new_group)  # (B g',) image of each row
    if not torch.equal(index.div(group, rounding_mode="floor"), expected):
        raise ValueError("reorder: every row must continue a row of its own image (images are never permuted)")
    return new_group


class CrossAttentionSite(nn.Module):
    """norm(x, CrossAttention(x, memories[memory].states[:, level])), the image keys/values cached once per
    image."""

    def __init__(self, attention: nn.Module, norm: nn.Module, memory: str = "regions", level: int = -1) -> None:
        super().__init__()
        self.attention = attention
        self.norm = norm
        self.memory = memory
        self.level = level

    def new_cache(self) -> KeyValueSource:
        """An empty compute-once cache for the image keys/values (with the mechanism's own parts, e.g. CATT's)."""
        return site_cache(self.attention, StaticKVCache())

    def forward(self, x: Tensor, memories: Memories, cache: KeyValueSource | None = None) -> Tensor:
        """``x`` (R, T, d) -> (R, T, d) attending ``memories[self.memory]`` (B images, R = B g) at one level."""
        memory = memories[self.memory]
        regions = memory.states[:, self.level]  # (B, N, d)
        mask = memory.key_mask  # (B, 1, 1, N), None if nothing is padded
        queries = per_image(x, regions.shape[0])  # (B, g T, d)
        attended = self.attention(queries, regions, regions, mask=mask, cache=cache, context=CROSS_CONTEXT).out
        return self.norm(x, per_row(attended, x))


@dataclass
class LayerCache:
    """Incremental-decoding caches of one decoder layer: ``self_attention`` holds one row per decoding row
    (beam/sample) and follows them through reordering; ``cross`` (whatever the site's ``new_cache`` returns)
    holds one row per image and is never reordered."""

    self_attention: KVCache
    cross: Any

    def reorder(self, index: Tensor) -> LayerCache:
        """The caches of decoding rows ``index`` (R',): the self-attention cache gathered, ``cross`` kept."""
        return dataclasses.replace(self, self_attention=self.self_attention.reorder(index))

    def select(self, rows: Tensor, images: Tensor) -> LayerCache:
        """The caches of a subset of images: decoding rows ``rows`` (R',) of the self-attention cache, images
        ``images`` (B',) of ``cross`` (:func:`~vlattn.attention.cache.reorder_state`)."""
        return LayerCache(self.self_attention.reorder(rows), reorder_state(self.cross, images))


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention site, feed-forward; residual + norm after each (the site has
    its own). (B, T, d) -> (B, T, d)."""

    def __init__(
        self, self_attention: nn.Module, self_norm: nn.Module, cross_site: nn.Module, feed_forward: nn.Module,
        ffn_norm: nn.Module,
    ) -> None:
        super().__init__()
        self.self_attn = self_attention
        self.self_norm = self_norm
        self.cross = cross_site
        self.ffn = feed_forward
        self.ffn_norm = ffn_norm

    def new_cache(self) -> LayerCache:
        """Empty caches: appending self-attention K/V and whatever the cross site needs."""
        return LayerCache(KVCache(), self.cross.new_cache())

    def forward(
        self, x: Tensor, memories: Memories, self_mask: Tensor | None, cache: LayerCache | None = None,
        self_memory: Tensor | None = None, self_context: AttentionContext = DECODER_SELF_CONTEXT,
    ) -> Tensor:
        """``x`` (B, T, d), ``self_mask`` bool (T, t), (B, 1, T, t) or None.

        ``self_memory`` (B|1, M, d): keys/values of the first sub-layer other than ``x`` (CATT's cross-sample stream:
        the word dictionary, or the cross-sample states of the same positions), attended with ``self_context``."""
        self_cache, cross_cache = (None, None) if cache is None else (cache.self_attention, cache.cross)
        source = x if self_memory is None else self_memory
        attended = self.self_attn(x, source, source, mask=self_mask, cache=self_cache, context=self_context).out
        x = self.self_norm(x, attended)
        x = self.cross(x, memories, cache=cross_cache)
        return self.ffn_norm(x, self.ffn(x))


class TransformerDecoder(nn.Module):
    """``forward(tokens (B,T), memories) -> logits (B, T, V)``; ``positions(length, start)`` gives the
    (length, d) position encodings (sinusoidal for the papers).

    ``pad_id``: when given, tokens equal to it are never attended by decoder self-attention and their own
    final states are zero (so their logits are the output bias: a uniform distribution without one) — the
    released M2 code's query/key padding masks, which matter when a pad token is fed anywhere but after
    the caption (e.g. chosen by beam search). None relies on padding following each caption: the causal
    mask then hides it from every real position.
    """

    def __init__(
        self, embed: nn.Embedding, positions: nn.Module, layers: Sequence[nn.Module], output: nn.Linear,
        dropout: float, pad_id: int | None = None,
    ) -> None:
        super().__init__()
        self.embed = embed
        self.positions = positions
        self.dropout = Dropout(dropout)
        self.layers = nn.ModuleList(layers)
        self.output = output
        self.pad_id = pad_id

    def new_cache(self) -> list[LayerCache]:
        """Empty per-layer caches for incremental decoding."""
        return [layer.new_cache() for layer in self.layers]

    def embed_positions(self, tokens: Tensor, start: int) -> Tensor:
        """The decoder's input at positions start..T-1 of the prefix ``tokens`` (B, T): word embeddings plus
        position encodings, dropout; (B, T - start, d)."""
        new = tokens[:, start:]  # (B, T')
        return self.dropout(self.embed(new) + self.positions(new.shape[1], start))

    def hidden(
        self, tokens: Tensor, memories: Memories, cache: list[LayerCache] | None = None, start: int = 0
    ) -> Tensor:
        """Final-layer states (B, T - start, d) of positions start..T-1 of the prefix ``tokens`` (B, T).

        Positions before ``start`` must already be in ``cache`` (incremental decoding passes the whole
        prefix and ``start = T - 1``).
        """
        x = self.embed_positions(tokens, start)  # (B, T', d)
        self_mask = causal_mask(x.shape[1], start, tokens.device)  # (T', T) or None
        real = None if self.pad_id is None else tokens != self.pad_id  # (B, T)
        if real is not None:
            keys = real[:, None, None, :]  # (B, 1, 1, T)
            self_mask = keys if self_mask is None else self_mask & keys  # (B, 1, T', T)
        for i, layer in enumerate(self.layers):
            x = layer(x, memories, self_mask, None if cache is None else cache[i])
        return x if real is None else x * real[:, start:, None]

    def forward(self, tokens: Tensor, memories: Memories) -> Tensor:
        """Teacher-forced logits (B, T, V) for input ``tokens`` (B, T)."""
        return self.output(self.hidden(tokens, memories))
