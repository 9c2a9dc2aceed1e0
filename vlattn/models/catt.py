"""Transformer+CATT (Yang et al. 2021, "Causal Attention for Vision-Language Tasks", Sec. 3.3, Fig. 5;
supplementary Sec. 9): every encoder and decoder layer carries an in-sample (IS) and a cross-sample (CS) stream.

    encoder   x^0 = Embed(regions),      c^0 = Embed(image dictionary)                 (K, D) -> (K, d), no mask
              x^l = Layer_l(x^{l-1} over x^{l-1})                    IS-ATT: the regions' self-attention
              c^l = Layer_l(x^{l-1} over c^{l-1})                    CS-ATT: the sample's queries over the dictionary
                                                                     (l = 1), then over the CS states (l > 1)
    decoder   y^0 = Embed(words) + positions,  s^0 = word dictionary               (K, d)
              y^l = Layer_l(y^{l-1} over y^{l-1}; cross over [V_I]_E = x^L)
              s^l = Layer_l(y^{l-1} over s^{l-1}; cross over [V_C]_E = c^L)    (causal over s for l > 1)
    output    p(w) = softmax(W fuse(y^L, s^L))                       Z^ = y^L, X^ = s^L, concatenated (Fig. 5)

The CS queries always come from the sample (Q_C = f(X), Eq. 5): each CS layer reads the IS stream's input as its
queries (the residual is over them) and the CS stream as its keys/values; after the first layer the CS stream has
the sample's length, so the dictionary costs O(K n) at the first layer and the CS stream O(n^2) after it (Sec. 3.3).
For single-modality layers this is the layer structure of the authors' released code (LXMERT+CATT, ``BertLayer``
of type ``ft_same``), the only CATT code they released. Its cross-modality layers (type ``g2g`` by default) differ
twice, and vlattn's decoder follows the paper in both (docs/catt.md lists them): there the CS stream queries
itself (queries from the CS states, not from the sample), and every cross-modality layer reads the encoder's CS
states rather than the previous layer's CS output, so only the last such layer reaches the output (perturbing the
first changes it by exactly 0); vlattn chains the CS stream from layer to layer with the sample's queries, as
Eq. 5 and Fig. 5 have it.

``ModelConfig.options`` of kind ``catt`` (:class:`CattOptions`):

- ``image_dictionary``, ``word_dictionary`` (:class:`~vlattn.catt.dictionary.DictionaryOptions`): sizes (500 each in
  the paper; Table 6: 100/200/500) and initialisation (``kmeans`` over the training regions / the word embeddings
  weighted by their training counts, in ``prepare``; ``random`` U(0, 0.01), the released code, "w/o Init";
  ``file``). The image dictionary lives in the region-feature space and enters through the encoder's input
  projection, as the regions do (with ``box_input`` its entries get zero box channels: they come from no place in
  the image), so VC and VI "stay in the same representation space" (Sec. 3.2); the word dictionary lives in the
  word-embedding space.
- ``share`` (default true, the paper's choice): IS and CS layers are one set of modules (attention, feed-forward
  and norms: "Embed(·) means the feed-forward network and the residual operation", Eq. 24). False is Table 6's
  "w/o Share": the CS stream has layers of its own. The input projection is shared either way.
- ``fusion``: ``concat`` (the paper: Z^ and X^ "concatenated and input into the final predictor"; the classifier
  reads 2d features) or ``concat_linear`` (the released code's ``fc_lang``: Linear(2d -> d) before it).

Parameters beyond the Transformer of the same config (benchmarks/PARAMETERS.md, "CATT parameters"): the dictionaries
(K_img x D_feature + K_word x d) and the classifier's second half (V x d for ``concat``; 2d x d + d for
``concat_linear``), and with ``share: false`` a second copy of every layer. The paper says the increments "only come
from the global image and word embedding dictionaries"; its concatenated predictor must widen too.

Every site mechanism is placed at the sites the CS stream adds: the encoder's and the decoder's self-attention
mechanisms also attend from the sample to the dictionary (a cross site), so each must allow cross sites.
The decoding state's memories are ``regions`` ([V_I]_E) and ``cross_sample`` ([V_C]_E); the CS stream calls the
shared cross sites with ``cross_sample`` in the place of ``regions``. Caches: per layer and stream, the layer-1 CS
projections of the word dictionary are computed once per decoding (:class:`~vlattn.attention.SharedKVCache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlattn.attention import AttentionContext, KVCache, SharedKVCache, Site
from vlattn.catt.dictionary import DictionaryOptions, GlobalDictionary
from vlattn.catt.fusion import Fusion, StreamFusion
from vlattn.config import ModelConfig, parse_options
from vlattn.errors import ConfigError
from vlattn.layers import BoxGeometry, SinusoidalPositions
from vlattn.layers.boxes import BOX_CHANNELS
from vlattn.models.decoder import DECODER_SELF_CONTEXT, LayerCache, Memories, TransformerDecoder, causal_mask
from vlattn.models.encoder import Memory, region_projection
from vlattn.models.transformer import ModelInputs, Parts, TransformerCaptioner, first_set

REGIONS, CROSS_SAMPLE = "regions", "cross_sample"  # the memories of the IS and the CS stream
CS_CONTEXT = AttentionContext(Site.CROSS)  # queries of the sample over the dictionary or the CS stream


@dataclass
class CattOptions:
    """``model.options`` of kind ``catt`` (see the module docstring)."""

    image_dictionary: DictionaryOptions = field(default_factory=DictionaryOptions)
    word_dictionary: DictionaryOptions = field(default_factory=DictionaryOptions)
    share: bool = True
    fusion: Fusion = "concat"


def two_streams(layers: nn.ModuleList, cross_sample: nn.ModuleList | None) -> list[tuple[nn.Module, nn.Module]]:
    """(IS layer, CS layer) pairs: the same module twice when the streams share their parameters."""
    return list(zip(layers, layers if cross_sample is None else cross_sample, strict=True))


class CattEncoder(nn.Module):
    """``forward(features (B,N,D'), boxes (B,N,4), region_mask (B,N))`` -> ``{"regions": Memory, "cross_sample":
    Memory}``, each holding all layer outputs (B, L, N, d); D' = D (+ ``box_channels`` zero channels for the
    dictionary entries). ``box_encoding`` (boxes (B, N, 4) -> (B, N, d), ``model.box_encoding``) is added to the
    projected regions only: the dictionary entries come from no place in an image."""

    def __init__(self, input_proj: nn.Module, layers: Sequence[nn.Module], cross_sample: Sequence[nn.Module] | None,
                 dictionary: GlobalDictionary, box_channels: int = 0, box_encoding: nn.Module | None = None) -> None:
        super().__init__()
        self.input_proj = input_proj
        self.layers = nn.ModuleList(layers)
        self.cross_sample = None if cross_sample is None else nn.ModuleList(cross_sample)
        self.dictionary = dictionary
        self.box_channels = box_channels
        self.box_encoding = box_encoding

    def forward(self, features: Tensor, boxes: Tensor, region_mask: Tensor) -> dict[str, Memory]:
        mask = region_mask[:, None, None, :]  # (B, 1, 1, N)
        context = AttentionContext(Site.ENCODER_SELF, query_mask=region_mask, geometry=BoxGeometry(boxes, region_mask))
        x = self.input_proj(features)  # (B, N, d)
        if self.box_encoding is not None:
            x = x + self.box_encoding(boxes)
        c = self.input_proj(F.pad(self.dictionary(), (0, self.box_channels)))[None]  # (1, K, d)
        c_mask = None  # the dictionary is never masked
        in_sample, cross_sample = [], []
        for layer, cs_layer in two_streams(self.layers, self.cross_sample):
            x, c = layer(x, mask, context), cs_layer(x, c_mask, CS_CONTEXT, memory=c)  # (B, N, d) each
            c_mask = mask
            in_sample.append(x)
            cross_sample.append(c)
        return {REGIONS: Memory(torch.stack(in_sample, dim=1), region_mask),
                CROSS_SAMPLE: Memory(torch.stack(cross_sample, dim=1), region_mask)}


@dataclass
class StreamCaches:
    """One decoder layer's caches: the IS stream's and the CS stream's."""

    in_sample: LayerCache
    cross_sample: LayerCache

    def reorder(self, index: Tensor) -> StreamCaches:
        """The caches of decoding rows ``index`` (R',): each stream's self-attention cache gathered (the CS stream's
        first layer holds the word dictionary's keys/values, a :class:`SharedKVCache` that stays as it is)."""
        return StreamCaches(self.in_sample.reorder(index), self.cross_sample.reorder(index))

    def select(self, rows: Tensor, images: Tensor) -> StreamCaches:
        """Each stream's caches of a subset of images (:meth:`LayerCache.select`)."""
        return StreamCaches(self.in_sample.select(rows, images), self.cross_sample.select(rows, images))


class CattDecoder(TransformerDecoder):
    """:class:`TransformerDecoder` with both streams: ``forward(tokens (B,T), memories) -> logits (B, T, V)``;
    ``hidden`` returns the fused streams (B, T, F)."""

    def __init__(
        self, embed: nn.Embedding, positions: nn.Module, layers: Sequence[nn.Module],
        cross_sample: Sequence[nn.Module] | None, dictionary: GlobalDictionary, fusion: StreamFusion,
        output: nn.Linear, dropout: float,
    ) -> None:
        super().__init__(embed, positions, layers, output, dropout)
        self.cross_sample = None if cross_sample is None else nn.ModuleList(cross_sample)
        self.dictionary = dictionary
        self.fusion = fusion

    def new_cache(self) -> list[StreamCaches]:  # type: ignore[override]
        """Empty caches: per layer, the IS stream's; the CS stream's layer-1 keys/values (the word dictionary) are
        projected once and shared by every row, later layers' appended."""
        return [
            StreamCaches(layer.new_cache(), LayerCache(SharedKVCache() if i == 0 else KVCache(), cs_layer.cross.new_cache()))
            for i, (layer, cs_layer) in enumerate(two_streams(self.layers, self.cross_sample))
        ]

    def hidden(  # type: ignore[override]
        self, tokens: Tensor, memories: Memories, cache: list[StreamCaches] | None = None, start: int = 0
    ) -> Tensor:
        """Fused final states (B, T - start, F) of positions start..T-1 of the prefix ``tokens`` (B, T); positions
        before ``start`` must already be in ``cache``."""
        y = self.embed_positions(tokens, start)  # (B, T', d)
        s = self.dictionary()[None]  # (1, K, d)
        self_mask = causal_mask(y.shape[1], start, tokens.device)
        cs_memories = {**memories, REGIONS: memories[CROSS_SAMPLE]}  # the CS stream's sites read [V_C]_E
        for i, (layer, cs_layer) in enumerate(two_streams(self.layers, self.cross_sample)):
            caches = None if cache is None else cache[i]
            y, s = (
                layer(y, memories, self_mask, None if caches is None else caches.in_sample),
                cs_layer(y, cs_memories, None if i == 0 else self_mask, None if caches is None else caches.cross_sample,
                         self_memory=s, self_context=CS_CONTEXT if i == 0 else DECODER_SELF_CONTEXT),
            )
        return self.fusion(y, s)


class CattCaptioner(TransformerCaptioner):
    """Transformer+CATT: :class:`TransformerCaptioner`'s decoding protocol over both streams' memories."""

    def memories(self, inputs: ModelInputs) -> dict[str, Memory]:
        """``{"regions": [V_I]_E, "cross_sample": [V_C]_E}``."""
        return self.encoder(*self.encoder_inputs(inputs))


def catt_options(cfg: ModelConfig) -> CattOptions:
    """``cfg.options`` validated, with the checks that need the rest of the model config."""
    options = parse_options(CattOptions, cfg.options, "model.options")
    if cfg.encoder_layers < 1:
        raise ConfigError("model.encoder_layers: Transformer+CATT needs at least one encoder layer (its "
                          "cross-sample stream feeds the decoder)")
    if cfg.tie_embeddings and options.fusion == "concat":
        raise ConfigError("model.tie_embeddings: with fusion 'concat' the classifier reads 2 x d_model features, "
                          "which a d_model word embedding cannot be tied to; use model.options.fusion: concat_linear")
    return options


def build_catt(cfg: ModelConfig, vocab_size: int, pad_id: int = 0) -> CattCaptioner:
    """The Transformer+CATT captioner described by ``cfg`` (see the module docstring)."""
    options = catt_options(cfg)
    parts = Parts(cfg, attention_dropout=0.0)  # the Transformer's default: none on the weights (docs/catt.md, Dropout)
    parts.check("encoder_self_attention", Site.CROSS)  # the CS stream's queries over the dictionary / CS states
    parts.check("decoder_self_attention", Site.CROSS)
    box_channels = BOX_CHANNELS if cfg.box_input else 0
    encoder = CattEncoder(
        region_projection(cfg.feature_dim + box_channels, cfg.d_model, cfg.dropout),
        [parts.encoder_layer() for _ in range(cfg.encoder_layers)],
        None if options.share else [parts.encoder_layer(Site.CROSS) for _ in range(cfg.encoder_layers)],
        GlobalDictionary(cfg.feature_dim, "image", options.image_dictionary, where="model.options.image_dictionary"),
        box_channels,
        parts.box_encoding(),
    )
    embed = nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_id)
    fusion = StreamFusion(cfg.d_model, options.fusion)
    output = nn.Linear(fusion.out_dim, vocab_size, bias=cfg.output_bias)
    if cfg.tie_embeddings:
        output.weight = embed.weight
    decoder = CattDecoder(
        embed, SinusoidalPositions(cfg.d_model, cfg.max_positions), parts.decoder_layers(parts.cross_site),
        None if options.share else parts.decoder_layers(parts.cross_site),
        GlobalDictionary(cfg.d_model, "word", options.word_dictionary, vocabulary_size=vocab_size,
                         where="model.options.word_dictionary"), fusion, output,
        first_set(cfg.embedding_dropout, cfg.dropout),
    )
    return CattCaptioner(encoder, decoder, use_cache=parts.use_cache, box_input=cfg.box_input)
