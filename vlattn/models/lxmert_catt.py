"""LXMERT+CATT (Yang et al. 2021, "Causal Attention for Vision-Language Tasks", Sec. 3.3 "LXMERT+CATT", Fig. 6,
Sec. 4.2): LXMERT (:mod:`vlattn.models.lxmert`) whose every attention module carries an in-sample (IS) and a
cross-sample (CS) stream — 9 self-CATT language layers, 5 self-CATT vision layers, 5 decoder blocks of two
cross-modality CATT (CM-CATT) and two self-CATT modules:

    language   w^0 = Embed(words),             q^0 = Embed(word dictionary)         (K_w, d_w) -> (K_w, d)
               w^l = Layer_l(w^{l-1} over w^{l-1})                 IS-ATT
               q^l = Layer_l(w^{l-1} over q^{l-1})                 CS-ATT: over the dictionary (l = 1, unmasked),
                                                                   then over the CS states (word mask)
    vision     r^0 = Embed(regions, boxes),    c^0 = Embed(image dictionary, 0)     (K_v, D) -> (K_v, d)
               r^l, c^l likewise over the regions and the image dictionary
    decoder    W, R = Cross_l(w over r, r over w)                  CM-CATT, IS: each stream queries the other
               Q, C = Cross_l(w over c, r over q)                  CM-CATT, CS: the sample's queries over the other
                                                                   stream's CS states (Fig. 6b: "the visual signals
                                                                   are used as the queries in both IS-ATT and CS-ATT")
               w, r = Self_l(W over W, R over R);  q, c = Self_l(W over Q, R over C)
    output     language = fuse(w, q), vision = fuse(r, c), pooled = tanh(W_p language[CLS])

The residual of every CS sub-layer is over its queries, the sample (Q_C = f(X), Eq. 5). With ``share: true`` (the
paper: "we share the parameters of IS-ATT and CS-ATT in each causal attention module") the CS stream runs the IS
stream's modules (attention, feed-forward, norms); ``share: false`` (Table 6's "w/o Share") gives it copies.
Because the residuals are over the sample, a cross-modality layer's CS state of one modality descends from the
other modality's CS state of the layer before: after N_X such layers the language output's CS half comes from the
image dictionary when N_X is odd (5 in the paper) and from the word dictionary when it is even, the vision
output's from the other — an answer head over the pooled words fine-tunes one dictionary, the pretraining heads
(over both outputs) train both. The
two dictionaries enter through LXMERT's own input embeddings, so V_C and V_I "stay in the same representation
space" (Sec. 3.2): the image dictionary lives in the region-feature space (k-means over the training regions) and
passes the region embedding with a zero box (an entry comes from no place in an image); the word dictionary lives
in the WordPiece-embedding space (k-means over the embedding table weighted by the words' training counts) and
passes the word embedding's LayerNorm and dropout (no position or token type: an entry has no place in a
sentence). 500 entries each (Sec. 4.2), initialised by k-means in the ``prepare`` step of a fresh run.

``fuse`` (:mod:`vlattn.catt.fusion`): ``concat`` (default; Sec. 3.2 / Fig. 5: IS and CS outputs "concatenated and
input into the final predictor") makes the language and vision outputs 2d wide (``Lxmert.output_dim``) and the
pooler Linear(2d -> d); ``concat_linear`` maps each back to d (the released ``fc_lang`` / ``fc_visn``).

``model.options`` of kind ``lxmert_catt`` (:class:`LxmertCattOptions`): LXMERT's and CATT's
(``image_dictionary``, ``word_dictionary``, ``share``, ``fusion``), and three options reproducing the authors'
released code (``yangxuntu/lxmertcatt``, ``src/lxrt/modeling.py``, ``bert_type ft_same``, its pretraining
setting), where it differs from the paper:

- ``dictionary_space: hidden``: both dictionaries are (K, d) tensors in the hidden space that enter the first
  layer as they are, not through the input embeddings (the released ``MV`` / ``ML``). There is no data in that
  space to cluster before training, so ``init`` must be ``random`` (what the released code does: it forces its
  k-means flag off) or ``file``;
- ``cross_queries: stream`` (the released ``cross_type g2g``, its default): in the cross-modality layers the CS
  stream queries itself, both in the cross-attention (CS words over CS regions) and in the self-attention that
  follows — the full cross-modality layer applied to the CS states;
- ``chain_cross: false``: every cross-modality layer reads the encoders' CS outputs (q^9, c^5) instead of the
  previous layer's, so only the last cross-modality layer reaches the outputs.

With ``init: random`` and ``fusion: concat_linear`` these reproduce the released forward pass
(``vlattn/presets/vqa-lxmert-catt-official.yaml``). Not offered: the released optimiser's weight decay on the
dictionaries (vlattn exempts them), the released fine-tuning script's ``bert_type ft`` (CATT only in the last
language and vision layers, unshared; 800 entries).

Parameters beyond LXMERT of the same config (``share: true``): the dictionaries (K_v x D + K_w x d_w) and the
fusion (``concat``: the pooler's second d x d; ``concat_linear``: 2 x (2d x d + d)); ``share: false`` adds a copy
of every layer. An ``lxmert-hf`` import into this kind (``vlattn import-checkpoint --config``) loads every LXMERT
tensor whose name and shape fit and initialises the rest (the dictionaries, the fusion, the pooler under
``concat``, the CS copies under ``share: false``), listed in the run's ``import.json``; its dictionaries keep
their U(0, 0.01) draw (an import reads no data to cluster; the imported config says ``init: random``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from vlattn.attention import AttentionContext, Site
from vlattn.catt.dictionary import GlobalDictionary
from vlattn.catt.fusion import StreamFusion
from vlattn.config import ModelConfig, parse_options
from vlattn.errors import ConfigError
from vlattn.models.catt import CS_CONTEXT, CattOptions, two_streams
from vlattn.models.encoder import EncoderLayer
from vlattn.models.lxmert import (
    BOX_DIM,
    CrossModalityLayer,
    Lxmert,
    LxmertEncoder,
    LxmertOptions,
    LxmertOutput,
    RegionEmbedding,
    StreamMasks,
    WordEmbeddings,
    input_embeddings,
    layer_stacks,
    lxmert_parts,
    with_head,
)


@dataclass
class LxmertCattOptions(CattOptions, LxmertOptions):
    """``model.options`` of kind ``lxmert_catt``: LXMERT's, CATT's and the released code's (module docstring)."""

    dictionary_space: Literal["input", "hidden"] = "input"
    cross_queries: Literal["sample", "stream"] = "sample"
    chain_cross: bool = True


@dataclass
class CrossSampleSetup:
    """The CS stream's modules and wiring: its own layers (None: the IS stream's, shared), the two dictionaries,
    the two fusions (language, vision) and the released-code switches."""

    dictionaries: tuple[GlobalDictionary, GlobalDictionary]  # word, image
    fusions: tuple[StreamFusion, StreamFusion]  # language, vision
    layers: tuple[Sequence[EncoderLayer], Sequence[EncoderLayer], Sequence[CrossModalityLayer]] | None = None
    dictionary_space: str = "input"
    cross_queries: str = "sample"
    chain_cross: bool = True


def cross_sample_stack(x: Tensor, entries: Tensor, layers: nn.ModuleList, cs_layers: nn.ModuleList | None,
                       keys: Tensor, context: AttentionContext) -> tuple[Tensor, Tensor]:
    """One single-modality encoder with both streams: ``x`` (B, N, d) and the dictionary ``entries`` (1, K, d) ->
    (IS states (B, N, d), CS states (B, N, d)). Each CS layer queries with the IS stream's input."""
    c, c_keys = entries, None  # the dictionary is never masked
    for layer, cs_layer in two_streams(layers, cs_layers):
        x, c = layer(x, keys, context), cs_layer(x, c_keys, CS_CONTEXT, memory=c)
        c_keys = keys
    return x, c


class LxmertCattEncoder(LxmertEncoder):
    """:class:`LxmertEncoder` with the cross-sample stream: the same ``forward`` signature, ``LxmertOutput`` whose
    ``language`` / ``vision`` are the fused streams (B, L|N, ``output_dim``)."""

    def __init__(self, words: WordEmbeddings, regions: RegionEmbedding, language_layers: list[EncoderLayer],
                 object_layers: list[EncoderLayer], cross_layers: list[CrossModalityLayer], pooler: nn.Linear,
                 setup: CrossSampleSetup) -> None:
        super().__init__(words, regions, language_layers, object_layers, cross_layers, pooler)
        self.word_dictionary, self.image_dictionary = setup.dictionaries
        self.language_fusion, self.vision_fusion = setup.fusions
        own = setup.layers
        self.cs_language_layers = None if own is None else nn.ModuleList(own[0])
        self.cs_object_layers = None if own is None else nn.ModuleList(own[1])
        self.cs_cross_layers = None if own is None else nn.ModuleList(own[2])
        self.dictionary_space = setup.dictionary_space
        self.cross_queries = setup.cross_queries
        self.chain_cross = setup.chain_cross
        self.output_dim = self.language_fusion.out_dim

    def extra_repr(self) -> str:
        return (f"dictionary_space={self.dictionary_space!r}, cross_queries={self.cross_queries!r}, "
                f"chain_cross={self.chain_cross}")

    def backbone_layers(self) -> list[nn.Module]:
        """LXMERT's layers and, unshared, the CS stream's own copies."""
        own = [self.cs_language_layers, self.cs_object_layers, self.cs_cross_layers]
        return [*super().backbone_layers(), *(layer for layers in own if layers is not None for layer in layers)]

    def dictionary_entries(self) -> tuple[Tensor, Tensor]:
        """The word (1, K_w, d) and image (1, K_v, d) dictionaries as the first layers read them."""
        words, image = self.word_dictionary(), self.image_dictionary()  # (K_w, d_w), (K_v, D)
        if self.dictionary_space == "input":
            words = self.words.dropout(self.words.norm(words))
            image = self.regions(image, image.new_zeros(image.shape[0], BOX_DIM))
        return words[None], image[None]

    def forward(self, questions: Tensor, question_mask: Tensor, features: Tensor, boxes: Tensor, region_mask: Tensor,
                token_types: Tensor | None = None) -> LxmertOutput:
        """As :meth:`LxmertEncoder.forward`; the outputs are the fused IS and CS streams."""
        m = StreamMasks.of(question_mask, region_mask, boxes)
        word_entries, image_entries = self.dictionary_entries()
        w, q = cross_sample_stack(self.words(questions, token_types), word_entries, self.language_layers,
                                  self.cs_language_layers, m.word_keys, m.words)
        r, c = cross_sample_stack(self.regions(features, boxes), image_entries, self.object_layers,
                                  self.cs_object_layers, m.region_keys, m.regions)
        encoded = (q, c)  # what every cross-modality layer reads with chain_cross: false
        for layer, cs_layer in two_streams(self.cross_layers, self.cs_cross_layers):
            cs_in = (q, c) if self.chain_cross else encoded
            if self.cross_queries == "stream":
                q, c = cs_layer(*cs_in, m)
                w, r = layer(w, r, m)
                continue
            crossed = layer.cross(w, r, m)  # (B, L, d), (B, N, d)
            cs_crossed = cs_layer.cross(w, r, m, memory=cs_in)
            (w, r), (q, c) = layer.streams(*crossed, m), cs_layer.streams(*crossed, m, memory=cs_crossed)
        language = self.language_fusion(w, q)  # (B, L, output_dim)
        return LxmertOutput(language, self.vision_fusion(r, c), torch.tanh(self.pooler(language[:, 0])))


def lxmert_catt_options(cfg: ModelConfig) -> LxmertCattOptions:
    """``cfg.options`` validated, with the checks that need the rest of the model config."""
    options = parse_options(LxmertCattOptions, cfg.options, "model.options")
    if cfg.encoder_layers < 1 or options.object_layers < 1:
        raise ConfigError("model.encoder_layers/model.options.object_layers: LXMERT+CATT needs at least one language "
                          "and one object-relationship layer (their cross-sample streams feed the cross-modality "
                          "layers)")
    if options.dictionary_space == "hidden":
        for name in ("image_dictionary", "word_dictionary"):
            if getattr(options, name).init == "kmeans":
                raise ConfigError(f"model.options.{name}.init: dictionary_space 'hidden' has no data to cluster before "
                                  "training; use init: random (the released code) or file")
    for name in ("image_dictionary", "word_dictionary"):
        getattr(options, name).check(f"model.options.{name}")
    return options


def build_lxmert_catt(cfg: ModelConfig, num_words: int, num_answers: int, pad_id: int = 0) -> Lxmert:
    """The LXMERT+CATT of ``cfg`` over ``num_words`` WordPiece ids with ``num_answers`` outputs (module docstring)."""
    options = lxmert_catt_options(cfg)
    parts = lxmert_parts(cfg, options, pad_id)
    parts.check("encoder_self_attention", Site.CROSS)  # the CS stream's queries over the dictionary / CS states
    parts.check("decoder_self_attention", Site.CROSS)
    d, hidden = cfg.d_model, options.dictionary_space == "hidden"
    fusions = (StreamFusion(d, options.fusion), StreamFusion(d, options.fusion))
    setup = CrossSampleSetup(
        (GlobalDictionary(d, "word", options.word_dictionary, vocabulary_size=num_words,
                          where="model.options.word_dictionary"),
         GlobalDictionary(d if hidden else cfg.feature_dim, "image", options.image_dictionary,
                          where="model.options.image_dictionary")),
        fusions, None if options.share else layer_stacks(parts, cfg, options),
        options.dictionary_space, options.cross_queries, options.chain_cross,
    )
    encoder = LxmertCattEncoder(*input_embeddings(cfg, options, num_words), *layer_stacks(parts, cfg, options),
                                nn.Linear(fusions[0].out_dim, d), setup)
    return with_head(encoder, cfg, options, num_answers)
