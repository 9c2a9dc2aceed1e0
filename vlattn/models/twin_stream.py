"""The Twin Stream Stacked Latent Attention model for VQA (Fan & Zhou 2018, Sec. 3.4, Fig. 3; setup: Sec. 4.1.2),
and the same model with plain stacked attention units (softmax in the main pathway, Sec. 3.2), its baseline in
the Sec. 4.1.4 comparison ("we fixed all other configurations").

    u_1..u_L     = bi-LSTM(W_e q)                        word states of the question (textual keys/values)
    h^(0),text   = [last forward state, first backward state]    (the question, Sec. 3.4)
    h^(0),vis    = mean of the real regions v_1..v_K              ("a simple spatial pooling")
    visual unit t:  f_SLA^vis(v_i,  h_vis^(t),  z_i^(t-1),vis)    h_vis^(1) = h^(0),text, h_vis^(t) = a^(t-1),text
    textual unit t: f_SLA^text(u_l, h_text^(t), z_l^(t-1),text)   h_text^(1) = h^(0),vis, h_text^(t) = a^(t-1),vis
    z^(0),vis    = [v, b_pos(h^(0),text)],   z^(0),text = u          (positional bias on the visual stream only)
    logits       = W_2 dropout(relu(W_1 relu([pool(conv(z^(T),vis)), pool(conv(z^(T),text))])))

Each stream's attended value is the other stream's next hidden input ("the attention embedding from the textual
stream as a hidden state input for the next attention layer of the visual stream", and symmetrically). The units,
positional bias, 1x1 convolution and pooling are those of :mod:`vlattn.attention.sla`; the choices the paper leaves
open there hold here too. Those of this model:

1. The first units' hidden inputs are the other stream's initial state (the question for the visual stream, the
   pooled image for the textual one); later units read the other stream's previous attended value (Fig. 3).
2. The textual stream attends over the bi-LSTM's word states (both directions concatenated), not the raw word
   embeddings; h^(0),text is the bi-LSTM's final state in each direction (the question encoder of
   :mod:`vlattn.models.question`, so ``model.word_vectors`` can initialise the embeddings from GloVe; the paper
   does not use GloVe).
3. Fusion ("a separate convolutional and pooling layer" per stream, "concatenated, passing through one FC layer
   then projected to a C dimensional space"; Fig. 3: "a two layer neural network"): ReLU after the pooled
   1x1 convolutions, FC (2F -> F) + ReLU + dropout, linear classifier (F -> C). F = ``fusion_dim`` (not given;
   1024 by default).
4. Features (Sec. 4.1.2): a 14 x 14 ResNet grid, "L2 normalization for each 1 x 1 x 2048 spatial feature"
   (``features: l2``, the default; ``raw`` leaves them as the store gives them), with the ``grid`` positional
   bias (``grid_cells: 196``; ``vlattn/presets/vqa-sla.yaml``); detector regions use the ``boxes`` bias. Word size (300)
   and bi-LSTM size (512 per direction) follow Sec. 4.1.2; its question length (the first 26 words) is a setting
   of the VQA data pipeline (``data.max_question_len``).
5. ``model.options.attention`` names the units: ``sla`` (options of :class:`StackedLatentAttention`; T, sigma,
   positional bias, pooling) or ``stacked`` (plain units of :class:`StackedAttention`: no latent pathway and no
   positional bias; each stream's output is its last attended value a^(T), projected to F by a linear layer).
6. Initialisation: "all model parameters are initialized as suggested by Glorot et al." (``init: glorot``, the
   default: :func:`vlattn.models.init.glorot`, Xavier-uniform weights and zero biases); ``torch`` keeps each
   module's own.
7. Dropout (the paper states none; 0.5 in ``vlattn/presets/vqa-sla.yaml`` is ours): ``model.dropout`` on the
   classifier's hidden layer and, unless ``model.attention_dropout`` is set, on every unit's attention weights;
   ``model.embedding_dropout`` adds dropout on the question word embeddings (none when null or 0).
8. Not stated by the paper, so they are the VQA task's: the loss (binary cross-entropy on the soft scores of
   the ten human answers), the candidate answers C (``data.answer_min_count``), the learning rate and its
   schedule. Its batch (800 on 8 GPUs) and Adam betas (0.9, 0.999) are settings of ``vlattn/presets/vqa-sla.yaml``.

Inputs (a mapping): ``features`` (B, K, D), ``boxes`` (B, K, 4) normalised, ``region_mask`` (B, K),
``questions`` (B, L) word ids, ``question_mask`` (B, L) (True = word), as :func:`vlattn.data.vqa.collate_vqa`
gives them. Output: answer logits (B, C).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlattn.attention import AttentionContext, Site, StackedAttention, StackedLatentAttention
from vlattn.attention.additive import attend_values
from vlattn.attention.sla import POSITIONAL_BIAS, Latent, LatentReadout, PositionalBias, latent_step, latent_units
from vlattn.attention.stacked import AttentionUnit, stacked_keys
from vlattn.config import MAX_WIDTH, ModelConfig, Spec, bounded, lookup, parse_options, spec
from vlattn.layers import BoxGeometry
from vlattn.layers.boxes import BOX_CHANNELS, with_box_channels
from vlattn.layers.dropout import Dropout
from vlattn.layers.pooling import masked_mean
from vlattn.models.init import glorot
from vlattn.models.question import QuestionEncoder, question_encoder
from vlattn.models.transformer import first_set


@dataclass
class TwinStreamOptions:
    """``model.options`` of the twin-stream model (see the module docstring): the units of both streams
    (``attention``: ``sla`` or ``stacked`` with that mechanism's options), word and bi-LSTM sizes, fusion width F."""

    attention: Spec = spec("sla")
    word_dim: int = bounded(300, ge=1, le=MAX_WIDTH)
    lstm_dim: int = bounded(512, ge=1, le=MAX_WIDTH)
    fusion_dim: int = bounded(1024, ge=1, le=MAX_WIDTH)
    features: Literal["l2", "raw"] = "l2"
    init: Literal["glorot", "torch"] = "glorot"


@dataclass
class StreamState:
    """One stream during the forward pass: per-unit keys (B, T, K, m), values (B, K, D), the SDPA-style mask
    (B, 1, 1, K), z^(t) (SLA) or the last attended value a^(t) (B, 1, D), and every unit's weights (B, 1, 1, K)."""

    keys: Tensor
    values: Tensor
    mask: Tensor
    latent: Latent | None = None
    attended: Tensor | None = None
    weights: list[Tensor] = field(default_factory=list)


class Stream(nn.Module):
    """A stream's three phases, ``start``, ``step`` and ``output``, are run through the module call
    (``stream("step", t, state, query)``) so that module hooks (``vlattn profile``'s FLOP counter) see every
    operation of the stream as its own."""

    def forward(self, phase: str, *args: Any) -> Any:
        return getattr(self, phase)(*args)


class LatentStream(Stream):
    """A stream of SLA units with its readout (pooled 1x1 convolution of z^(T)) and optional positional bias."""

    def __init__(self, units: nn.ModuleList, readout: LatentReadout, positional: PositionalBias | None,
                 dropout: float) -> None:
        super().__init__()
        self.units = units
        self.readout = readout
        self.positional = positional
        self.dropout = dropout

    def start(self, values: Tensor, mask: Tensor, seed: Tensor, context: AttentionContext) -> StreamState:
        """``values`` (B, K, D), ``mask`` (B, K); ``seed`` (B, 1, Dq) bootstraps the positional bias."""
        bias = None if self.positional is None else self.positional(seed, values, context)  # (B, 1, K, P)
        return StreamState(stacked_keys(self.units, values), values, mask[:, None, None, :], latent=Latent(bias, None))

    def step(self, t: int, state: StreamState, query: Tensor) -> Tensor:
        """Unit ``t`` with hidden input ``query`` (B, 1, Dq); returns a^(t) (B, 1, D)."""
        weights, state.latent = latent_step(self.units[t], state.keys[:, t], state.values, query, state.latent,
                                            state.mask, self.dropout, self.training)
        state.weights.append(weights)
        return state.latent.summary

    def output(self, state: StreamState) -> Tensor:
        """pool(conv(z^(T))) over the real positions: (B, F)."""
        return self.readout(state.latent, state.mask[:, 0])[:, 0]


class PlainStream(Stream):
    """A stream of plain attention units (softmax in the main pathway); output: a linear map of a^(T)."""

    def __init__(self, units: nn.ModuleList, output: nn.Linear, dropout: float) -> None:
        super().__init__()
        self.units = units
        self.out = output
        self.dropout = dropout

    def start(self, values: Tensor, mask: Tensor, seed: Tensor, context: AttentionContext) -> StreamState:
        return StreamState(stacked_keys(self.units, values), values, mask[:, None, None, :])

    def step(self, t: int, state: StreamState, query: Tensor) -> Tensor:
        _, logits = self.units[t](state.keys[:, t], query)
        weights, state.attended = attend_values(logits, state.values, state.mask, self.dropout, self.training)
        state.weights.append(weights)
        return state.attended

    def output(self, state: StreamState) -> Tensor:
        return self.out(state.attended)[:, 0]


def latent_stream(options: Any, key_dim: int, query_dim: int, hidden: int, fusion_dim: int, dropout: float,
                  positional: bool) -> LatentStream:
    """An SLA stream from :class:`StackedLatentAttention.Options`; the positional bias only when ``positional``."""
    bias = POSITIONAL_BIAS[options.position if positional else "none"](query_dim, options.bias_channels,
                                                                        options.grid_cells)
    units = latent_units(key_dim, query_dim, hidden, options.activation, 0 if bias is None else options.bias_channels,
                         options.units)
    return LatentStream(units, LatentReadout(hidden, key_dim, fusion_dim, options.pooling), bias, dropout)


def plain_stream(options: Any, key_dim: int, query_dim: int, hidden: int, fusion_dim: int, dropout: float,
                 positional: bool) -> PlainStream:
    """A plain stream from :class:`StackedAttention.Options` (every unit's hidden input has the other stream's size)."""
    units = nn.ModuleList(AttentionUnit(key_dim, query_dim, hidden, options.activation) for _ in range(options.units))
    return PlainStream(units, nn.Linear(key_dim, fusion_dim), dropout)


# ``model.options.attention.name`` -> (its options dataclass, the stream builder)
STREAMS: dict[str, tuple[type, Callable[..., nn.Module]]] = {
    "sla": (StackedLatentAttention.Options, latent_stream),
    "stacked": (StackedAttention.Options, plain_stream),
}


def question_state(words: Tensor, mask: Tensor) -> Tensor:
    """h^(0),text (B, 2H) from the bi-LSTM's word states ``words`` (B, L, 2H) and ``mask`` (B, L): the forward
    direction's state at the last word and the backward direction's at the first (each direction's final state)."""
    half = words.shape[-1] // 2
    last = (mask.sum(dim=1) - 1).clamp(min=0)  # (B,)
    forward = words[torch.arange(words.shape[0], device=words.device), last, :half]  # (B, H)
    return torch.cat([forward, words[:, 0, half:]], dim=-1)


class TwinStreamVQA(nn.Module):
    """``forward(inputs) -> logits (B, C)`` (see the module docstring); :meth:`streams` also returns both streams'
    per-unit attention weights."""

    def __init__(self, question: QuestionEncoder, visual: nn.Module, textual: nn.Module, classifier: nn.Module,
                 box_input: bool = False, l2_features: bool = True) -> None:
        super().__init__()
        self.question = question
        self.visual = visual
        self.textual = textual
        self.classifier = classifier
        self.box_input = box_input
        self.l2_features = l2_features

    @property
    def word_embeddings(self) -> nn.Embedding:
        """The question word embeddings (for ``prepare`` hooks)."""
        return self.question.word_embedding

    def backbone_layers(self) -> list[nn.Module]:
        """The two attention streams (units, positional bias, readout): what ``vlattn profile`` counts as the
        backbone."""
        return [self.visual, self.textual]

    def streams(self, inputs: Mapping[str, Tensor]) -> tuple[StreamState, StreamState]:
        """Run both streams T units, exchanging their attended values; the final states (visual, textual)."""
        features, boxes, region_mask = inputs["features"], inputs["boxes"], inputs["region_mask"]
        if self.l2_features:
            features = F.normalize(features, dim=-1)  # (B, K, D), padding stays zero
        if self.box_input:
            features = with_box_channels(features, boxes)  # (B, K, D + 5)
        words = self.question(inputs["questions"], inputs["question_mask"])  # (B, L, 2H)
        question = question_state(words, inputs["question_mask"])  # (B, 2H)
        image = masked_mean(features, region_mask)[:, None]  # (B, 1, D): h^(0),vis
        question = question[:, None]  # (B, 1, 2H): h^(0),text
        context = AttentionContext(Site.CROSS, geometry=BoxGeometry(boxes, region_mask))
        visual = self.visual("start", features, region_mask, question, context)
        textual = self.textual("start", words, inputs["question_mask"], image, AttentionContext(Site.CROSS))
        to_visual, to_textual = question, image
        for t in range(len(self.visual.units)):
            seen = self.visual("step", t, visual, to_visual)  # a^(t),vis (B, 1, D)
            read = self.textual("step", t, textual, to_textual)  # a^(t),text (B, 1, 2H)
            to_visual, to_textual = read, seen
        return visual, textual

    def forward(self, inputs: Mapping[str, Tensor]) -> Tensor:
        visual, textual = self.streams(inputs)
        fused = torch.cat([self.visual("output", visual), self.textual("output", textual)], dim=-1)  # (B, 2F)
        return self.classifier(fused)  # (B, C)


def build_twin_stream(cfg: ModelConfig, vocab_size: int, num_answers: int, pad_id: int = 0) -> TwinStreamVQA:
    """The twin-stream model of ``cfg``: it reads ``feature_dim``, ``d_model`` (the units' hidden size m; Fig. 4:
    256, 512, 1024), ``dropout`` (the classifier; the attention weights unless ``attention_dropout`` is set),
    ``attention_dropout``, ``embedding_dropout`` (question words; default none), ``box_input`` and ``options``
    (:class:`TwinStreamOptions`)."""
    options = parse_options(TwinStreamOptions, cfg.options, "model.options")
    where = "model.options.attention"
    options_cls, make_stream = lookup(STREAMS, options.attention.name, "twin-stream attention", f"{where}.name")
    unit_options = parse_options(options_cls, options.attention.options, f"{where}.options")
    visual_dim = cfg.feature_dim + (BOX_CHANNELS if cfg.box_input else 0)
    text_dim = 2 * options.lstm_dim
    attention_dropout = first_set(cfg.attention_dropout, cfg.dropout)
    sizes = dict(hidden=cfg.d_model, fusion_dim=options.fusion_dim, dropout=attention_dropout)
    question = question_encoder(vocab_size, options.word_dim, options.lstm_dim, pad_id, cfg.word_vectors,
                                bidirectional=True, embedding_dropout=first_set(cfg.embedding_dropout, 0.0))
    visual = make_stream(unit_options, visual_dim, text_dim, positional=True, **sizes)
    textual = make_stream(unit_options, text_dim, visual_dim, positional=False, **sizes)
    classifier = nn.Sequential(
        nn.ReLU(), nn.Linear(2 * options.fusion_dim, options.fusion_dim), nn.ReLU(), Dropout(cfg.dropout),
        nn.Linear(options.fusion_dim, num_answers),
    )
    model = TwinStreamVQA(question, visual, textual, classifier, box_input=cfg.box_input,
                          l2_features=options.features == "l2")
    if options.init == "glorot":
        glorot(model)
    return model
