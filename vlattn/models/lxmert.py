"""LXMERT, Learning Cross-Modality Encoder Representations from Transformers (Tan and Bansal, EMNLP 2019),
assembled from vlattn's attention, feed-forward and norm parts. Sections refer to arXiv:1908.07490; the
structure and every numerical detail follow the released code (``airsplay/lxmert``, ``src/lxrt/modeling.py``),
which Hugging Face transformers' ``LxmertModel`` reproduces; ``tests/models/test_lxmert.py`` checks this model
against ``LxmertModel`` to 1e-5 at a small and at the full size.

- Language input (Sec. 2.1, "word-level sentence embeddings"): BERT's WordPiece ids (``[CLS]`` first) ->
  word + position + token-type embeddings, LayerNorm, dropout.
- Visual input ("object-level image embeddings"): each region's feature f and box p (x1, y1, x2, y2 normalised
  to [0, 1]) -> (LayerNorm(W_F f + b_F) + LayerNorm(W_P p + b_P)) / 2, dropout.
- Language encoder: ``model.encoder_layers`` (N_L = 9) self-attention + feed-forward layers over the words;
  object-relationship encoder: ``model.options.object_layers`` (N_R = 5) such layers over the regions;
  cross-modality encoder: ``model.decoder_layers`` (N_X = 5) layers of bi-directional cross-attention (words
  attend to regions and regions to words, both from the layer's inputs), then per stream self-attention and a
  feed-forward (Sec. 2.2, Fig. 1). Every sub-layer is post-norm residual, LayerNorm(x + dropout(f(x))) with
  LayerNorm's eps 1e-12 (``model.options.layer_norm_eps``); the feed-forward is Linear, GeLU (the exact,
  erf-based one), Linear, with no dropout inside.
- Pooler (Sec. 2.3 "output representations"): tanh(W h_[CLS] + b) of the language output's first position.
- Heads: VQA and GQA put the released code's answer classifier over the pooled vector (Linear(d, 2d), GeLU,
  LayerNorm(2d), Linear(2d, A)); NLVR2 (``model.options.images: 2``) encodes the statement with each of its two
  images, concatenates the two pooled vectors and classifies them with the same block over 2d inputs
  (Linear(2d, 2d), GeLU, LayerNorm, Linear(2d, 2)).

The paper leaves open, and the released code settles:

- one cross-attention sub-layer (attention and its residual LayerNorm) serves both directions
  (``share_cross_attention: true``, the released ``visual_attention`` module, which the pretrained weights
  need); ``false`` gives each direction its own;
- the word, position and token-type tables all have padding row 0 (the released ``BertEmbeddings``: their row 0
  gets no gradient, so position 0 — the ``[CLS]`` token's — keeps its pretrained or initial embedding);
- dropout (``model.dropout``, BERT's 0.1) after the embeddings, on the attention weights
  (``model.attention_dropout`` default: ``model.dropout``) and on every sub-layer output;
- initialisation: BERT's, every Linear and Embedding weight from N(0, 0.02), biases zero, LayerNorms one/zero
  (the mechanisms' own extra parameters, such as memory slots or dictionaries, keep their own).

Attention sites, each from the registry and checked against the mechanism's capabilities:

| config key | site | kind | context |
|---|---|---|---|
| ``model.encoder_self_attention`` | word self-attention (language and cross-modality layers) | ``encoder_self`` | question mask |
| ``model.decoder_self_attention`` | region self-attention (relationship and cross-modality layers) | ``encoder_self`` | region mask, box geometry |
| ``model.decoder_cross_attention`` | cross-attention, both directions | ``cross`` | the queries' mask |

The regions' boxes enter through the visual embedding (and a geometry-aware mechanism's context), so
``model.box_input`` and ``model.box_encoding`` are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from vlattn.attention import AttentionContext, Site
from vlattn.config import MAX_HEADS, MAX_LAYERS, ModelConfig, bounded, parse_options
from vlattn.errors import ConfigError
from vlattn.layers import BoxGeometry, PostNorm, build_feed_forward
from vlattn.layers.dropout import Dropout
from vlattn.models.encoder import EncoderLayer
from vlattn.models.init import bert_init
from vlattn.models.transformer import Parts, first_set

BOX_DIM = 4  # x1, y1, x2, y2 normalised to [0, 1]


@dataclass
class LxmertOptions:
    """``model.options`` of kind ``lxmert`` (see the module docstring)."""

    object_layers: int = bounded(5, ge=0, le=MAX_LAYERS)
    token_types: int = bounded(2, ge=1, le=MAX_HEADS)
    layer_norm_eps: float = bounded(1e-12, gt=0.0)
    share_cross_attention: bool = True
    images: Literal[1, 2] = 1  # images per question: 2 for NLVR2's pair head
    init_std: float = bounded(0.02, gt=0.0)


@dataclass
class LxmertOutput:
    """The encoder's outputs: ``language`` (B, L, d) and ``vision`` (B, N, d) states and the ``pooled`` (B, d)
    vector of the first word."""

    language: Tensor
    vision: Tensor
    pooled: Tensor


class WordEmbeddings(nn.Module):
    """BERT's input embedding: word + position + token type, LayerNorm, dropout; ids (B, L) -> (B, L, d)."""

    def __init__(self, vocab_size: int, d_model: int, max_positions: int, token_types: int, eps: float,
                 dropout: float) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.position = nn.Embedding(max_positions, d_model, padding_idx=0)
        self.token_type = nn.Embedding(token_types, d_model, padding_idx=0)
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = Dropout(dropout)

    def forward(self, ids: Tensor, token_types: Tensor | None = None) -> Tensor:
        """``ids`` (B, L) and optional ``token_types`` (B, L) (default all 0) -> (B, L, d)."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        types = torch.zeros_like(ids) if token_types is None else token_types
        return self.dropout(self.norm(self.word(ids) + self.position(positions) + self.token_type(types)))


class RegionEmbedding(nn.Module):
    """LXMERT's object-level embedding: (LayerNorm(W_F f) + LayerNorm(W_P p)) / 2, dropout; features (B, N, D)
    and boxes (B, N, 4) -> (B, N, d)."""

    def __init__(self, feature_dim: int, d_model: int, eps: float, dropout: float) -> None:
        super().__init__()
        self.feature_proj = nn.Linear(feature_dim, d_model)
        self.feature_norm = nn.LayerNorm(d_model, eps=eps)
        self.box_proj = nn.Linear(BOX_DIM, d_model)
        self.box_norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = Dropout(dropout)

    def forward(self, features: Tensor, boxes: Tensor) -> Tensor:
        return self.dropout((self.feature_norm(self.feature_proj(features)) + self.box_norm(self.box_proj(boxes))) / 2)


@dataclass(frozen=True)
class StreamMasks:
    """Key masks (B, 1, 1, L|N) and attention contexts of one batch: the words' and the regions' self-attention
    and the two directions of cross-attention (queries: words over regions, regions over words)."""

    word_keys: Tensor
    region_keys: Tensor
    words: AttentionContext
    regions: AttentionContext
    words_to_regions: AttentionContext
    regions_to_words: AttentionContext

    @classmethod
    def of(cls, question_mask: Tensor, region_mask: Tensor, boxes: Tensor) -> StreamMasks:
        return cls(
            question_mask[:, None, None, :], region_mask[:, None, None, :],
            AttentionContext(Site.ENCODER_SELF, query_mask=question_mask),
            AttentionContext(Site.ENCODER_SELF, query_mask=region_mask, geometry=BoxGeometry(boxes, region_mask)),
            AttentionContext(Site.CROSS, query_mask=question_mask),
            AttentionContext(Site.CROSS, query_mask=region_mask),
        )


class CrossModalityLayer(nn.Module):
    """One cross-modality layer (Sec. 2.2): both streams cross-attend the other's input, then each runs its own
    self-attention + feed-forward layer. ``visual_cross`` None: the words' cross-attention sub-layer (attention
    and norm) serves the regions too (the released code)."""

    def __init__(self, cross_attn: nn.Module, cross_norm: nn.Module, language: EncoderLayer, vision: EncoderLayer,
                 visual_cross: tuple[nn.Module, nn.Module] | None = None) -> None:
        super().__init__()
        self.cross_attn = cross_attn
        self.cross_norm = cross_norm
        self.visual_cross_attn, self.visual_cross_norm = visual_cross if visual_cross is not None else (None, None)
        self.language = language
        self.vision = vision

    def cross(self, words: Tensor, regions: Tensor, m: StreamMasks,
              memory: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """The cross-attention sub-layers: ``words`` (B, L, d) attend to the regions and ``regions`` (B, N, d) to
        the words; ``memory`` (words', regions') of the same shapes gives other keys/values (CATT's cross-sample
        stream), the residuals staying over the queries."""
        attn, norm = self.cross_attn, self.cross_norm
        shared = self.visual_cross_attn is None
        v_attn, v_norm = (attn, norm) if shared else (self.visual_cross_attn, self.visual_cross_norm)
        word_source, region_source = (words, regions) if memory is None else memory
        crossed_words = norm(words, attn(words, region_source, region_source, mask=m.region_keys,
                                         context=m.words_to_regions).out)
        crossed_regions = v_norm(regions, v_attn(regions, word_source, word_source, mask=m.word_keys,
                                                 context=m.regions_to_words).out)
        return crossed_words, crossed_regions

    def streams(self, words: Tensor, regions: Tensor, m: StreamMasks,
                memory: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """Each stream's self-attention + feed-forward layer; ``memory`` as in :meth:`cross` (attended without
        box geometry: its positions hold cross-sample states)."""
        if memory is None:
            return self.language(words, m.word_keys, m.words), self.vision(regions, m.region_keys, m.regions)
        # cross sites with the queries' masks: the words' (words_to_regions) and the regions' (regions_to_words)
        return (self.language(words, m.word_keys, m.words_to_regions, memory=memory[0]),
                self.vision(regions, m.region_keys, m.regions_to_words, memory=memory[1]))

    def forward(self, words: Tensor, regions: Tensor, m: StreamMasks) -> tuple[Tensor, Tensor]:
        """``words`` (B, L, d), ``regions`` (B, N, d) -> both updated."""
        return self.streams(*self.cross(words, regions, m), m)


class LxmertEncoder(nn.Module):
    """The embeddings, the three encoders and the pooler: ``forward(questions, question_mask, features, boxes,
    region_mask, token_types=None)`` -> :class:`LxmertOutput`."""

    def __init__(self, words: WordEmbeddings, regions: RegionEmbedding, language_layers: list[EncoderLayer],
                 object_layers: list[EncoderLayer], cross_layers: list[CrossModalityLayer], pooler: nn.Linear) -> None:
        super().__init__()
        self.words = words
        self.regions = regions
        self.language_layers = nn.ModuleList(language_layers)
        self.object_layers = nn.ModuleList(object_layers)
        self.cross_layers = nn.ModuleList(cross_layers)
        self.pooler = pooler
        self.output_dim = pooler.in_features  # width of the language and vision outputs (the pretraining heads' input)

    def backbone_layers(self) -> list[nn.Module]:
        """The language, object-relationship and cross-modality layers."""
        return [*self.language_layers, *self.object_layers, *self.cross_layers]

    def forward(self, questions: Tensor, question_mask: Tensor, features: Tensor, boxes: Tensor, region_mask: Tensor,
                token_types: Tensor | None = None) -> LxmertOutput:
        """``questions`` (B, L) WordPiece ids, ``question_mask`` (B, L) (True = word), ``features`` (B, N, D),
        ``boxes`` (B, N, 4) normalised x1y1x2y2, ``region_mask`` (B, N) (True = region)."""
        m = StreamMasks.of(question_mask, region_mask, boxes)
        words = self.words(questions, token_types)
        regions = self.regions(features, boxes)
        for layer in self.language_layers:
            words = layer(words, m.word_keys, m.words)
        for layer in self.object_layers:
            regions = layer(regions, m.region_keys, m.regions)
        for layer in self.cross_layers:
            words, regions = layer(words, regions, m)
        return LxmertOutput(words, regions, torch.tanh(self.pooler(words[:, 0])))


def classifier_head(in_dim: int, hidden: int, out: int, eps: float) -> nn.Sequential:
    """The released code's classifier: Linear(in, hidden), GeLU, LayerNorm(hidden), Linear(hidden, out)."""
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.LayerNorm(hidden, eps=eps), nn.Linear(hidden, out))


class Lxmert(nn.Module):
    """LXMERT with a classifier over the pooled vector: ``forward(inputs) -> logits (B, A)``.

    ``inputs`` maps ``questions`` (B, L) WordPiece ids, ``question_mask`` (B, L), optional ``token_types``
    (B, L), and ``features``, ``boxes``, ``region_mask`` of shapes (B, N, D), (B, N, 4), (B, N) — or, with
    ``images`` = 2 (NLVR2), (B, 2, N, D), (B, 2, N, 4), (B, 2, N): the question is read with each image and the
    two pooled vectors are classified together."""

    question_tokens = "wordpiece"  # the VQA tasks encode questions as [CLS] WordPiece [SEP] for it

    def __init__(self, encoder: LxmertEncoder, head: nn.Sequential, images: int = 1) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head
        self.images = images

    @property
    def output_dim(self) -> int:
        """The width of :meth:`encode`'s ``language`` and ``vision`` states (d; 2d for LXMERT+CATT's ``concat``)."""
        return self.encoder.output_dim

    @property
    def word_embeddings(self) -> nn.Embedding:
        """The WordPiece embedding table (for ``prepare`` hooks, as the other models expose theirs)."""
        return self.encoder.words.word

    def backbone_layers(self) -> list[nn.Module]:
        """The language, object-relationship and cross-modality layers (no embeddings, pooler or head)."""
        return self.encoder.backbone_layers()

    def encode(self, inputs: Mapping[str, Tensor]) -> LxmertOutput:
        """The encoder's outputs; with ``images`` = 2 the rows are (statement, image) pairs, image-major within
        each statement (2B rows)."""
        questions, question_mask = inputs["questions"], inputs["question_mask"]
        token_types = inputs.get("token_types")
        features, boxes, region_mask = inputs["features"], inputs["boxes"], inputs["region_mask"]
        if self.images > 1:
            def per_image(x: Tensor | None) -> Tensor | None:
                return None if x is None else x.repeat_interleave(self.images, 0)

            questions, question_mask, token_types = per_image(questions), per_image(question_mask), per_image(token_types)
            features, boxes, region_mask = features.flatten(0, 1), boxes.flatten(0, 1), region_mask.flatten(0, 1)
        return self.encoder(questions, question_mask, features, boxes, region_mask, token_types)

    def forward(self, inputs: Mapping[str, Tensor]) -> Tensor:
        """Logits (B, A)."""
        pooled = self.encode(inputs).pooled  # (B images, d)
        return self.head(pooled.reshape(-1, self.images * pooled.shape[-1]))


@dataclass
class LxmertParts(Parts):
    """:class:`~vlattn.models.transformer.Parts` with LXMERT's LayerNorm eps and GeLU feed-forward."""

    eps: float = 1e-12

    def norm(self) -> PostNorm:
        return PostNorm(self.cfg.d_model, self.cfg.dropout, nn.LayerNorm(self.cfg.d_model, eps=self.eps))

    def feed_forward(self) -> nn.Module:
        spec = self.cfg.feed_forward
        return build_feed_forward(spec.name, self.cfg.d_model, self.cfg.d_ff, 0.0, spec.options,
                                  where="model.feed_forward", activation="gelu")

    def stream_layer(self, site_key: str, has_geometry: bool) -> EncoderLayer:
        """A self-attention + feed-forward layer whose attention is ``model.<site_key>``."""
        attention = self.attention(site_key, Site.ENCODER_SELF, has_geometry=has_geometry)
        return EncoderLayer(attention, self.feed_forward(), self.norm(), self.norm())

    def word_layer(self) -> EncoderLayer:
        return self.stream_layer("encoder_self_attention", has_geometry=False)

    def region_layer(self) -> EncoderLayer:
        return self.stream_layer("decoder_self_attention", has_geometry=True)

    def cross_layer(self, shared: bool) -> CrossModalityLayer:
        attention, norm = self.attention("decoder_cross_attention", Site.CROSS), self.norm()
        visual = None if shared else (self.attention("decoder_cross_attention", Site.CROSS), self.norm())
        return CrossModalityLayer(attention, norm, self.word_layer(), self.region_layer(), visual)


def lxmert_parts(cfg: ModelConfig, options: LxmertOptions, pad_id: int) -> LxmertParts:
    """The parts builder of an LXMERT-family model, after the checks every such kind makes."""
    if cfg.box_input or cfg.box_encoding != "none":
        raise ConfigError("model.box_input/model.box_encoding: LXMERT embeds the boxes itself; leave them off")
    if pad_id != 0:
        raise ConfigError(f"model.kind: {cfg.kind} reads BERT WordPiece ids with [PAD] = 0, got a vocabulary padding "
                          f"with {pad_id}")
    return LxmertParts(cfg, use_cache=False, attention_dropout=cfg.dropout, eps=options.layer_norm_eps)


def input_embeddings(cfg: ModelConfig, options: LxmertOptions,
                     num_words: int) -> tuple[WordEmbeddings, RegionEmbedding]:
    """The word and the region embeddings of ``cfg``."""
    d, eps, dropout = cfg.d_model, options.layer_norm_eps, first_set(cfg.embedding_dropout, cfg.dropout)
    return (WordEmbeddings(num_words, d, cfg.max_positions, options.token_types, eps, dropout),
            RegionEmbedding(cfg.feature_dim, d, eps, dropout))


def layer_stacks(parts: LxmertParts, cfg: ModelConfig,
                 options: LxmertOptions) -> tuple[list[EncoderLayer], list[EncoderLayer], list[CrossModalityLayer]]:
    """Fresh language, object-relationship and cross-modality layers."""
    return ([parts.word_layer() for _ in range(cfg.encoder_layers)],
            [parts.region_layer() for _ in range(options.object_layers)],
            [parts.cross_layer(options.share_cross_attention) for _ in range(cfg.decoder_layers)])


def with_head(encoder: LxmertEncoder, cfg: ModelConfig, options: LxmertOptions, num_answers: int) -> Lxmert:
    """``encoder`` under the answer classifier, BERT-initialised (dictionaries keep their own initialisation)."""
    model = Lxmert(encoder, classifier_head(options.images * cfg.d_model, 2 * cfg.d_model, num_answers,
                                            options.layer_norm_eps), options.images)
    bert_init(model, options.init_std)
    return model


def build_lxmert(cfg: ModelConfig, num_words: int, num_answers: int, pad_id: int = 0) -> Lxmert:
    """The LXMERT of ``cfg`` over a WordPiece vocabulary of ``num_words`` entries (``pad_id`` must be 0, BERT's
    ``[PAD]``) with ``num_answers`` outputs (2 for NLVR2)."""
    options = parse_options(LxmertOptions, cfg.options, "model.options")
    parts = lxmert_parts(cfg, options, pad_id)
    encoder = LxmertEncoder(*input_embeddings(cfg, options, num_words), *layer_stacks(parts, cfg, options),
                            nn.Linear(cfg.d_model, cfg.d_model))
    return with_head(encoder, cfg, options, num_answers)
