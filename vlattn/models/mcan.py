"""MCAN, the Deep Modular Co-Attention Network (Yu, Yu, Cui, Tao and Tian, CVPR 2019), encoder-decoder
variant (MCA_ED; Sec. 4, "deep co-attention learning"), assembled from injected parts. Sections refer to
arXiv:1906.10770; the structure follows the released ``core/model/net.py`` and ``mca.py`` exactly:

- question: word embedding (300-d, trainable, GloVe-initialisable) -> LSTM(d); image: detector regions ->
  Linear(D -> d) (Sec. 4, "question and image representations"; ``model.box_input`` appends the box);
- encoder: L self-attention (SA) units over the question words (Sec. 3, Fig. 2a);
- decoder: L self-guided-attention (SGA) units over the regions: image self-attention, then attention
  *guided* by the encoder's final question states (queries = regions, keys/values = words), then a
  feed-forward (Fig. 2b; the SA(Y)-SGA(X,Y) composition of Fig. 3c); every sub-layer post-norm residual,
  LayerNorm(x + dropout(f(x)));
- attentional reduction of each stream to a vector (AttFlat, :mod:`vlattn.models.reduction`), sum fusion,
  LayerNorm, and a linear classifier over the answer vocabulary (Sec. 4, "multimodal fusion and output
  classifier"). The released code
  applies a sigmoid and ``BCELoss``; the model returns logits and the loss uses BCE-with-logits (the same
  function, computed stably).

Every attention site is chosen by name from the registry (``vlattn.attention.ATTENTION``), checked against
the mechanism's capabilities with errors naming the config key:

| config key | site | kind | context |
|---|---|---|---|
| ``model.encoder_self_attention`` | question self-attention (SA) | ``encoder_self`` | question mask, no boxes |
| ``model.decoder_self_attention`` | image self-attention (SGA) | ``encoder_self`` | region mask and box geometry (GSA) |
| ``model.decoder_cross_attention`` | question-guided attention (SGA) | ``cross`` | region mask of the queries |

and the feed-forward from ``model.feed_forward`` (``vlattn.layers.FEED_FORWARD``). ``model.options``
(:class:`MCANOptions`): ``word_dim`` (300), the reduction's ``flat_hidden`` (default d), ``flat_glimpses``
(1) and ``flat_out`` (default 2d), and ``layer_norm``: ``paper`` (``nn.LayerNorm``) or ``official`` (the
released code's variant with the unbiased standard deviation and eps 1e-6 added to it,
:class:`~vlattn.layers.StdLayerNorm`). The released code masks attention with -1e9 instead of -inf: the
same softmax whenever a row has a real key, which every row here has.

The 6+6 backbone of MCAN-small (d=512, FFN 2048, 8 heads) has 44,138,496 parameters: 6 SA units of
3,152,384 (attention 4 x 262,656, FFN 2,099,712, two norms 2,048) and 6 SGA units of 4,204,032 (two
attentions, FFN, three norms) — the LW-Transformer paper's Table II "Transformer" row (44.1M).

NG-SAN's VQA model (Guo et al. 2020, Table 9 "+GSA"; vlattn/presets/vqa-mcan-gsa.yaml) is this MCAN with ``gsa`` at
``model.decoder_self_attention``: every image self-attention layer adds the geometric bias of the region boxes
(one :class:`~vlattn.layers.BoxGeometry` per forward pass, shared by the layers). ``model.box_encoding`` (the
captioners' absolute box encoding) is refused: the boxes reach MCAN through ``model.box_input`` or GSA.

``model.embedding_dropout`` adds dropout on the question's word embeddings, before the LSTM (default none, as
in the released code).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from torch import Tensor, nn

from vlattn.attention import AttentionContext, Site
from vlattn.config import MAX_HEADS, MAX_WIDTH, ModelConfig, bounded, parse_options
from vlattn.errors import ConfigError
from vlattn.layers import BoxGeometry, PostNorm, StdLayerNorm
from vlattn.layers.boxes import BOX_CHANNELS, with_box_channels
from vlattn.models.encoder import EncoderLayer
from vlattn.models.question import QuestionEncoder, question_encoder
from vlattn.models.reduction import AttentionalReduction
from vlattn.models.transformer import Parts, first_set


@dataclass
class MCANOptions:
    """``model.options`` of kind ``mcan`` (see the module docstring)."""

    word_dim: int = bounded(300, ge=1, le=MAX_WIDTH)
    flat_hidden: int | None = bounded(None, ge=1, le=MAX_WIDTH)
    flat_glimpses: int = bounded(1, ge=1, le=MAX_HEADS)
    flat_out: int | None = bounded(None, ge=1, le=MAX_WIDTH)
    layer_norm: Literal["paper", "official"] = "paper"


class SelfGuidedLayer(nn.Module):
    """SGA unit: x <- norm1(x, SelfAttention(x)); x <- norm2(x, GuidedAttention(x, y)); x <- norm3(x, FFN(x)).
    ``x`` (B, N, d) the regions, ``y`` (B, L, d) the guiding question states."""

    def __init__(
        self, self_attention: nn.Module, self_norm: nn.Module, guided_attention: nn.Module, guided_norm: nn.Module,
        feed_forward: nn.Module, ffn_norm: nn.Module,
    ) -> None:
        super().__init__()
        self.self_attn = self_attention
        self.self_norm = self_norm
        self.guided_attn = guided_attention
        self.guided_norm = guided_norm
        self.ffn = feed_forward
        self.ffn_norm = ffn_norm

    def forward(
        self, x: Tensor, x_mask: Tensor | None, self_context: AttentionContext, y: Tensor, y_mask: Tensor,
        guided_context: AttentionContext, self_memory: Tensor | None = None,
    ) -> Tensor:
        """``x_mask`` (B, 1, 1, N) / ``y_mask`` (B, 1, 1, L) bool, True = real key.

        ``self_memory`` (B|1, M, d): keys/values of the first sub-layer other than ``x`` (CATT's cross-sample
        stream, :mod:`vlattn.models.mcan_catt`), masked by ``x_mask``; the residual is over ``x`` either way."""
        source = x if self_memory is None else self_memory
        x = self.self_norm(x, self.self_attn(x, source, source, mask=x_mask, context=self_context).out)
        x = self.guided_norm(x, self.guided_attn(x, y, y, mask=y_mask, context=guided_context).out)
        return self.ffn_norm(x, self.ffn(x))


@dataclass(frozen=True)
class CoAttentionMasks:
    """Key masks and attention contexts of one batch: ``word_keys`` (B, 1, 1, L) and ``region_keys`` (B, 1, 1, N)
    bool, True = real key; contexts of the ``question`` self-attention (question mask), the ``image``
    self-attention (region mask, box geometry) and the question-``guided`` attention (region mask)."""

    word_keys: Tensor
    region_keys: Tensor
    question: AttentionContext
    image: AttentionContext
    guided: AttentionContext

    @classmethod
    def of(cls, question_mask: Tensor, region_mask: Tensor, boxes: Tensor) -> CoAttentionMasks:
        """From ``question_mask`` (B, L), ``region_mask`` (B, N) and ``boxes`` (B, N, 4) normalised x1y1x2y2."""
        return cls(
            question_mask[:, None, None, :], region_mask[:, None, None, :],
            AttentionContext(Site.ENCODER_SELF, query_mask=question_mask),
            AttentionContext(Site.ENCODER_SELF, query_mask=region_mask, geometry=BoxGeometry(boxes, region_mask)),
            AttentionContext(Site.CROSS, query_mask=region_mask),
        )


class CoAttentionBackbone(nn.Module):
    """MCA_ED: the question passes all encoder (SA) layers; every decoder (SGA) layer is guided by the final
    question states. ``forward`` -> (question (B, L, d), regions (B, N, d))."""

    def __init__(self, encoder: Sequence[EncoderLayer], decoder: Sequence[SelfGuidedLayer]) -> None:
        super().__init__()
        self.encoder = nn.ModuleList(encoder)
        self.decoder = nn.ModuleList(decoder)

    def forward(
        self, words: Tensor, question_mask: Tensor, regions: Tensor, region_mask: Tensor, boxes: Tensor
    ) -> tuple[Tensor, Tensor]:
        """``words`` (B, L, d), ``question_mask`` (B, L), ``regions`` (B, N, d), ``region_mask`` (B, N),
        ``boxes`` (B, N, 4) normalised x1y1x2y2."""
        m = CoAttentionMasks.of(question_mask, region_mask, boxes)
        for layer in self.encoder:
            words = layer(words, m.word_keys, m.question)
        for layer in self.decoder:
            regions = layer(regions, m.region_keys, m.image, words, m.word_keys, m.guided)
        return words, regions


class MCAN(nn.Module):
    """``forward(inputs) -> answer logits (B, A)``; ``inputs`` maps ``features`` (B, N, D), ``boxes``
    (B, N, 4) normalised, ``region_mask`` (B, N), ``questions`` (B, L) word ids and ``question_mask``
    (B, L) (True = word)."""

    def __init__(
        self, question: QuestionEncoder, image_proj: nn.Module, backbone: CoAttentionBackbone,
        reduce_question: AttentionalReduction, reduce_image: AttentionalReduction, fusion_norm: nn.Module,
        classifier: nn.Linear, box_input: bool = False,
    ) -> None:
        super().__init__()
        self.question = question
        self.image_proj = image_proj
        self.backbone = backbone
        self.reduce_question = reduce_question
        self.reduce_image = reduce_image
        self.fusion_norm = fusion_norm
        self.classifier = classifier
        self.box_input = box_input

    @property
    def word_embeddings(self) -> nn.Embedding:
        """The question word embeddings (for ``prepare`` hooks, as captioners expose theirs)."""
        return self.question.word_embedding

    def backbone_layers(self) -> list[nn.Module]:
        """The encoder and decoder layers (the backbone counted by the LW paper's Table II)."""
        return [*self.backbone.encoder, *self.backbone.decoder]

    def image_features(self, inputs: Mapping[str, Tensor]) -> Tensor:
        """The region features (B, N, D), with the box channels appended under ``box_input`` (B, N, D + 5)."""
        features = inputs["features"]
        return with_box_channels(features, inputs["boxes"]) if self.box_input else features

    def reduce(self, words: Tensor, question_mask: Tensor, regions: Tensor, region_mask: Tensor) -> Tensor:
        """Both modalities' states, words (B, L, d) and regions (B, N, d), reduced, summed and normalised:
        (B, flat_out)."""
        return self.fusion_norm(self.reduce_question(words, question_mask) + self.reduce_image(regions, region_mask))

    def fused(self, inputs: Mapping[str, Tensor]) -> Tensor:
        """The fused, normalised question-image vector (B, flat_out) before the classifier."""
        boxes, region_mask, question_mask = inputs["boxes"], inputs["region_mask"], inputs["question_mask"]
        words = self.question(inputs["questions"])  # (B, L, d)
        words, regions = self.backbone(words, question_mask, self.image_proj(self.image_features(inputs)),
                                       region_mask, boxes)
        return self.reduce(words, question_mask, regions, region_mask)

    def forward(self, inputs: Mapping[str, Tensor]) -> Tensor:
        """Answer logits (B, A)."""
        return self.classifier(self.fused(inputs))


@dataclass
class MCANParts(Parts):
    """:class:`~vlattn.models.transformer.Parts` with MCAN's choice of LayerNorm."""

    layer_norm: str = "paper"

    def layer_norm_module(self, width: int) -> nn.Module:
        return StdLayerNorm(width) if self.layer_norm == "official" else nn.LayerNorm(width)

    def norm(self) -> PostNorm:
        return PostNorm(self.cfg.d_model, self.cfg.dropout, self.layer_norm_module(self.cfg.d_model))

    def question_layer(self) -> EncoderLayer:
        """SA unit over the question words (no boxes at this site)."""
        attention = self.attention("encoder_self_attention", Site.ENCODER_SELF)
        return EncoderLayer(attention, self.feed_forward(), self.norm(), self.norm())

    def image_layer(self) -> SelfGuidedLayer:
        """SGA unit over the regions (boxes available to the self-attention)."""
        self_attention = self.attention("decoder_self_attention", Site.ENCODER_SELF, has_geometry=True)
        self_norm = self.norm()
        guided = self.attention("decoder_cross_attention", Site.CROSS)
        guided_norm = self.norm()
        return SelfGuidedLayer(self_attention, self_norm, guided, guided_norm, self.feed_forward(), self.norm())


@dataclass
class MCANStems:
    """The parts of an MCAN around its backbone: the ``question`` encoder, the ``image_proj``ection, and the
    predictor's width ``flat_out`` with a factory of its reductions."""

    question: QuestionEncoder
    image_proj: nn.Linear
    flat_out: int
    reduction: Callable[[], AttentionalReduction]


def mcan_stems(cfg: ModelConfig, options: MCANOptions, num_words: int, pad_id: int) -> MCANStems:
    """The inputs and the reductions of the MCAN of ``cfg`` (``options`` its parsed ``model.options``)."""
    if cfg.box_encoding != "none":
        raise ConfigError(f"model.box_encoding: {cfg.box_encoding!r} is not supported by MCAN (the boxes reach it "
                          "through model.box_input or gsa at model.decoder_self_attention); use 'none'")
    d = cfg.d_model
    flat_out = options.flat_out or 2 * d

    def reduction() -> AttentionalReduction:
        return AttentionalReduction(d, options.flat_hidden or d, options.flat_glimpses, flat_out, cfg.dropout)

    return MCANStems(
        question=question_encoder(num_words, options.word_dim, d, pad_id, cfg.word_vectors,
                                  embedding_dropout=first_set(cfg.embedding_dropout, 0.0)),  # released MCAN: none
        image_proj=nn.Linear(cfg.feature_dim + (BOX_CHANNELS if cfg.box_input else 0), d),
        flat_out=flat_out,
        reduction=reduction,
    )


def build_mcan(cfg: ModelConfig, num_words: int, num_answers: int, pad_id: int = 0) -> MCAN:
    """The MCAN described by ``cfg`` for ``num_words`` question words and ``num_answers`` candidate answers."""
    options = parse_options(MCANOptions, cfg.options, "model.options")
    parts = MCANParts(cfg, use_cache=False, layer_norm=options.layer_norm)
    backbone = CoAttentionBackbone(
        [parts.question_layer() for _ in range(cfg.encoder_layers)],
        [parts.image_layer() for _ in range(cfg.decoder_layers)],
    )
    stems = mcan_stems(cfg, options, num_words, pad_id)
    return MCAN(
        question=stems.question,
        image_proj=stems.image_proj,
        backbone=backbone,
        reduce_question=stems.reduction(),
        reduce_image=stems.reduction(),
        fusion_norm=parts.layer_norm_module(stems.flat_out),
        classifier=nn.Linear(stems.flat_out, num_answers),
        box_input=cfg.box_input,
    )
