"""MCAN+CATT: the Transformer+CATT architecture of CATT (Yang et al. 2021, "Causal Attention for Vision-Language
Tasks", Sec. 3.3, Fig. 5; supplementary Sec. 9, "Transformer + CATT ... for solving IC and VQA") on the project's
Transformer VQA model, MCAN's encoder-decoder (:mod:`vlattn.models.mcan`), for the Transformer+CATT rows of
Tables 3-4. Every question (SA) and image (SGA) layer carries an in-sample (IS) and a cross-sample (CS) stream:

    question  w^0 = LSTM(words),               q^0 = LSTM(word dictionary)          (K_w, word_dim) -> (K_w, d)
              w^l = SA_l(w^{l-1} over w^{l-1})                       IS-ATT over the question
              q^l = SA_l(w^{l-1} over q^{l-1})                       CS-ATT over the dictionary (l = 1), then the CS
                                                                     states (question mask) (l > 1)
    image     r^0 = Linear(regions),           c^0 = Linear(image dictionary)       (K_i, D) -> (K_i, d)
              r^l = SGA_l(r^{l-1} over r^{l-1}; guided by [V_I] = w^L)
              c^l = SGA_l(r^{l-1} over c^{l-1}; guided by [V_C] = q^L)
    output    Z^ = LN(flat(w^L) + flat(r^L)),  X^ = LN(flat(q^L) + flat(c^L))
              p(a) = sigmoid(W fuse(Z^, X^))                         concatenated into the predictor (Fig. 5)

As in :mod:`vlattn.models.catt` (the captioner), the CS queries always come from the sample (Q_C = f(X), Eq. 5) and
the residual is over them (the released LXMERT+CATT ``ft_same`` layers); the dictionaries enter through the
model's own input embeddings, so V_C and V_I "stay in the same representation space" (Sec. 3.2): the image
dictionary lives in the region-feature space and passes the image projection (with zero box channels under
``box_input``), the word dictionary lives in the word-embedding space (k-means over the question words' embeddings
weighted by their training counts) and passes the question LSTM as one-word sequences. Fig. 5 names the image
side the encoder and the language side the decoder; MCAN's question encoder guides its image decoder, and each
stream's guide is the same stream's question states. The attentional reductions, their LayerNorm and the
classifier are MCAN's predictor, one set for both streams; the classifier reads [Z^; X^] (2 x flat_out) with
``fusion: concat`` (the paper) or Linear([Z^; X^]) with ``concat_linear`` (the released code's ``fc``).

``ModelConfig.options`` of kind ``mcan_catt``: MCAN's (:class:`~vlattn.models.mcan.MCANOptions`) and CATT's
(:class:`~vlattn.models.catt.CattOptions`: ``image_dictionary``, ``word_dictionary`` — 500 entries each in the
paper —, ``share``, ``fusion``). With ``share: true`` (the paper's choice) the streams are one set of layers and the
parameters beyond MCAN are the dictionaries (K_i x D + K_w x word_dim) and the classifier's second half
(A x flat_out for ``concat``; 2F x F + F for ``concat_linear``); ``share: false`` adds a second copy of every layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from vlattn.attention import Site
from vlattn.catt.dictionary import GlobalDictionary
from vlattn.catt.fusion import StreamFusion
from vlattn.config import ModelConfig, parse_options
from vlattn.layers.boxes import BOX_CHANNELS
from vlattn.models.catt import CS_CONTEXT, CattOptions, two_streams
from vlattn.models.encoder import EncoderLayer
from vlattn.models.mcan import (
    MCAN,
    CoAttentionBackbone,
    CoAttentionMasks,
    MCANOptions,
    MCANParts,
    SelfGuidedLayer,
    mcan_stems,
)


@dataclass
class MCANCattOptions(CattOptions, MCANOptions):
    """``model.options`` of kind ``mcan_catt``: MCAN's and CATT's (see the module docstring)."""


@dataclass
class Streams:
    """The two streams of one modality: ``in_sample`` (B, N, d) with its ``mask`` (B, N), and ``cross_sample``
    (B, N, d) (the same mask)."""

    in_sample: Tensor
    cross_sample: Tensor
    mask: Tensor


class CattCoAttentionBackbone(CoAttentionBackbone):
    """MCA_ED with both streams: ``forward`` -> (question :class:`Streams`, image :class:`Streams`).
    ``cross_encoder``/``cross_decoder``: the CS stream's own layers, or None when the streams share them."""

    def __init__(
        self, encoder: Sequence[EncoderLayer], decoder: Sequence[SelfGuidedLayer],
        cross_encoder: Sequence[EncoderLayer] | None, cross_decoder: Sequence[SelfGuidedLayer] | None,
    ) -> None:
        super().__init__(encoder, decoder)
        self.cross_encoder = None if cross_encoder is None else nn.ModuleList(cross_encoder)
        self.cross_decoder = None if cross_decoder is None else nn.ModuleList(cross_decoder)

    def forward(  # type: ignore[override]
        self, words: Tensor, word_entries: Tensor, question_mask: Tensor, regions: Tensor, region_entries: Tensor,
        region_mask: Tensor, boxes: Tensor,
    ) -> tuple[Streams, Streams]:
        """``words`` (B, L, d), ``word_entries`` (1, K_w, d), ``question_mask`` (B, L), ``regions`` (B, N, d),
        ``region_entries`` (1, K_i, d), ``region_mask`` (B, N), ``boxes`` (B, N, 4) normalised x1y1x2y2."""
        m = CoAttentionMasks.of(question_mask, region_mask, boxes)
        w, q, q_keys = words, word_entries, None  # the dictionary is never masked
        for layer, cs_layer in two_streams(self.encoder, self.cross_encoder):
            w, q = layer(w, m.word_keys, m.question), cs_layer(w, q_keys, CS_CONTEXT, memory=q)  # (B, L, d)
            q_keys = m.word_keys
        r, c, c_keys = regions, region_entries, None
        for layer, cs_layer in two_streams(self.decoder, self.cross_decoder):
            r, c = (
                layer(r, m.region_keys, m.image, w, m.word_keys, m.guided),
                cs_layer(r, c_keys, CS_CONTEXT, q, m.word_keys, m.guided, self_memory=c),
            )  # (B, N, d) each
            c_keys = m.region_keys
        return Streams(w, q, question_mask), Streams(r, c, region_mask)


class MCANCatt(MCAN):
    """MCAN+CATT: ``forward(inputs) -> answer logits (B, A)`` over both streams (module docstring); the inputs are
    MCAN's."""

    def __init__(
        self, question: nn.Module, image_proj: nn.Module, backbone: CattCoAttentionBackbone,
        reduce_question: nn.Module, reduce_image: nn.Module, fusion_norm: nn.Module, classifier: nn.Linear,
        word_dictionary: GlobalDictionary, image_dictionary: GlobalDictionary, streams: StreamFusion,
        box_input: bool = False,
    ) -> None:
        super().__init__(question, image_proj, backbone, reduce_question, reduce_image, fusion_norm, classifier,
                         box_input)
        # registered after the question encoder: its prepare hook (word vectors) runs before the word dictionary's
        self.word_dictionary = word_dictionary
        self.image_dictionary = image_dictionary
        self.streams = streams

    def dictionary_entries(self) -> tuple[Tensor, Tensor]:
        """The word and image dictionaries embedded as the question words and the regions are: (1, K_w, d) through
        the question LSTM (each entry a one-word question), (1, K_i, d) through the image projection."""
        words = self.question.lstm(self.word_dictionary()[:, None, :])[0].transpose(0, 1)  # (1, K_w, d)
        entries = self.image_dictionary()  # (K_i, D)
        if self.box_input:
            entries = F.pad(entries, (0, BOX_CHANNELS))  # the entries come from no place in an image
        return words, self.image_proj(entries)[None]

    def fused(self, inputs: Mapping[str, Tensor]) -> Tensor:
        """The fused predictor input (B, F): [Z^; X^] or its linear map."""
        features, boxes, region_mask = self.image_features(inputs), inputs["boxes"], inputs["region_mask"]
        word_entries, region_entries = self.dictionary_entries()
        question, image = self.backbone(
            self.question(inputs["questions"]), word_entries, inputs["question_mask"], self.image_proj(features),
            region_entries, region_mask, boxes,
        )
        in_sample = self.reduce(question.in_sample, question.mask, image.in_sample, image.mask)  # Z^, (B, flat_out)
        cross_sample = self.reduce(question.cross_sample, question.mask, image.cross_sample, image.mask)  # X^
        return self.streams(in_sample, cross_sample)


def build_mcan_catt(cfg: ModelConfig, num_words: int, num_answers: int, pad_id: int = 0) -> MCANCatt:
    """The MCAN+CATT described by ``cfg`` for ``num_words`` question words and ``num_answers`` answers."""
    options = parse_options(MCANCattOptions, cfg.options, "model.options")
    parts = MCANParts(cfg, use_cache=False, layer_norm=options.layer_norm)
    parts.check("encoder_self_attention", Site.CROSS)  # the CS stream's queries over the dictionary / CS states
    parts.check("decoder_self_attention", Site.CROSS)
    separate = not options.share
    backbone = CattCoAttentionBackbone(
        [parts.question_layer() for _ in range(cfg.encoder_layers)],
        [parts.image_layer() for _ in range(cfg.decoder_layers)],
        [parts.question_layer() for _ in range(cfg.encoder_layers)] if separate else None,
        [parts.image_layer() for _ in range(cfg.decoder_layers)] if separate else None,
    )
    stems = mcan_stems(cfg, options, num_words, pad_id)
    streams = StreamFusion(stems.flat_out, options.fusion)
    return MCANCatt(
        stems.question, stems.image_proj, backbone, stems.reduction(), stems.reduction(),
        parts.layer_norm_module(stems.flat_out), nn.Linear(streams.out_dim, num_answers),
        GlobalDictionary(options.word_dim, "word", options.word_dictionary, vocabulary_size=num_words,
                         where="model.options.word_dictionary"),
        GlobalDictionary(cfg.feature_dim, "image", options.image_dictionary, where="model.options.image_dictionary"),
        streams, box_input=cfg.box_input,
    )
