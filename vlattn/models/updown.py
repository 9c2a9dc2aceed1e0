"""The Up-Down captioner (Anderson et al. 2018, "Bottom-Up and Top-Down Attention for Image Captioning and
Visual Question Answering", Sec. 3.2, Eq. 2-7, Fig. 3): two LSTM layers around a top-down attention over the
detector regions.

    x^1_t   = [h^2_{t-1}, v_bar, W_e Pi_t]          attention LSTM input (Eq. 2); v_bar: mean of the real regions
    h^1_t   = LSTM_1(x^1_t, h^1_{t-1})
    v_hat_t = TopDown(h^1_t, {v_i})                 Eq. 3-5, the mechanism of ``model.decoder_cross_attention``
    x^2_t   = [v_hat_t, h^1_t]                      language LSTM input (Eq. 6)
    h^2_t   = LSTM_2(x^2_t, h^2_{t-1})
    p(y_t)  = softmax(W_p h^2_t + b_p)              Eq. 7

The top-down site takes any registered mechanism that accepts queries of another size than its keys
(``additive`` by default, ``stacked``, ``sla``); the language LSTM reads the mechanism's ``out_dim``, so one that
returns several attended vectors side by side (CATT's in-sample and cross-sample outputs) plugs in unchanged.
The site's context carries the regions' boxes (SLA's positional bias). There is no dropout on attention weights
by default (neither the paper nor the released codes have it; ``model.attention_dropout`` adds it).
``model.embedding_dropout`` sets the dropout after the word embedding (default: none for ``paper``,
``model.dropout`` for ``self_critical``).

Sizes: ``model.d_model`` is the LSTM size M (1,000 in the paper, 1024 by default here), ``options.embed_dim``
the word embedding E (1,000 in the paper), ``options.attention_dim`` the attention's hidden size H (512).

Variants (``options.variant``):

- ``paper``: the paper's equations, which are also the layer structure of the authors' released Caffe code
  (peteanderson80/Up-Down-Captioner, ``scripts/create_caption_lstm.py``): attention over the raw region
  features, v_bar their mean, the attended D-d feature into the language LSTM. ``model.dropout`` applies to h^2
  before the output layer; the released code has no dropout (set it to 0).
- ``self_critical``: the layer structure of self-critical.pytorch's ``UpDownModel``
  (``captioning/models/AttModel.py``), which most later Up-Down work (CATT among it) builds on: the regions are
  embedded by Linear(D -> M) + ReLU + dropout before the attention (its ``att_embed``), the pooled feature by its
  own Linear(D -> M) + ReLU + dropout (``fc_embed``), the word embeddings are followed by ReLU + dropout, and h^2
  by dropout.

What still differs from the released codes (benchmarks/RESULTS.md, "Up-Down parameters", counts every
parameter): torch's ``LSTMCell`` has two bias vectors (b_ih, b_hh) where Caffe's LSTM has one (self-critical.pytorch
has torch's two); the registry's additive attention has biases in W_va and W_ha where the Caffe layers have
none (w_a has none in ``paper``, as in Eq. 3; ``self_critical`` adds it, as ``alpha_net`` has one); the vocabulary keeps separate PAD/BOS/EOS/UNK rows where self-critical.pytorch shares row 0 for BOS, EOS
and padding; the initialisation is torch's default (Caffe: Gaussian std 0.01, forget-gate bias 1).

Decoding (``encode``/``step``/``reorder``): with ``use_cache`` the state carries the LSTM states after the
tokens consumed so far and the attention's compute-once cache of per-image projections (W_va v for additive
attention, every unit's W_v v for SLA), so one step costs one cell; without it, ``step`` re-runs the
recurrence over the whole prefix. Beam search, sampling and SCST drive it as any captioner. As in the
Transformer family (docs/architecture.md), the regions and the attention's cache stay at one row per image for
the whole search; only the LSTM states have one row per decoding row (g beams or samples per image, grouped image
by image), the top-down site attends an image's g queries as one block, and ``reorder`` keeps every row with its
image and gathers only the LSTM states.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from vlattn.attention import (
    AttentionContext,
    AttentionDims,
    CausalAttention,
    KeyValueSource,
    Site,
    StaticKVCache,
    attention_class,
    build_attention,
    check_placement,
    reorder_state,
    site_cache,
)
from vlattn.config import MAX_WIDTH, ModelConfig, bounded, parse_options
from vlattn.errors import ConfigError
from vlattn.layers import BoxGeometry
from vlattn.layers.boxes import BOX_CHANNELS, with_box_channels
from vlattn.layers.dropout import Dropout
from vlattn.layers.pooling import masked_mean
from vlattn.layers.rows import image_rows
from vlattn.models.decoder import per_image, regroup
from vlattn.models.transformer import first_set

ModelInputs = Mapping[str, Tensor]
TOP_DOWN_SITE = "decoder_cross_attention"


@dataclass
class UpDownOptions:
    """``model.options`` of kind ``updown`` (see the module docstring)."""

    variant: Literal["paper", "self_critical"] = "paper"
    embed_dim: int = bounded(1024, ge=1, le=MAX_WIDTH)
    attention_dim: int = bounded(512, ge=1, le=MAX_WIDTH)


@dataclass
class Regions:
    """The image as the decoder reads it: ``features`` (B, N, Dk) the attended set, ``mask`` (B, N) bool
    (True = real region), ``pooled`` (B, Dp) the pooled feature v_bar, ``geometry`` the boxes."""

    features: Tensor
    mask: Tensor
    pooled: Tensor
    geometry: BoxGeometry


@dataclass
class LSTMStates:
    """(h, c) of the attention LSTM and of the language LSTM, (B, M) each."""

    attention: tuple[Tensor, Tensor]
    language: tuple[Tensor, Tensor]


@dataclass
class UpDownCache:
    """The recurrence after ``steps`` tokens (one row per decoding row) and the top-down attention's
    compute-once cache (one row per image)."""

    lstm: LSTMStates
    attention: KeyValueSource
    steps: int = 0


@dataclass
class UpDownState:
    """Decoding state: the prepared ``regions`` (B images) and, when caching, the :class:`UpDownCache`;
    ``group`` g, the decoding rows per image (``step`` takes B g rows, grouped image by image)."""

    regions: Regions
    cache: UpDownCache | None = None
    group: int = 1


class UpDownCaptioner(nn.Module):
    """Attention LSTM -> top-down attention -> language LSTM -> word (module docstring). Parts are injected:
    ``word_input``/``region_input``/``pooled_input`` map the embedded words (B, E), the region features
    (B, N, D) and their mean (B, D) to what the LSTMs and the attention read (identity for the paper variant)."""

    def __init__(
        self, embed: nn.Embedding, word_input: nn.Module, region_input: nn.Module, pooled_input: nn.Module,
        attention_lstm: nn.LSTMCell, attention: nn.Module, language_lstm: nn.LSTMCell, output: nn.Linear,
        dropout: float, box_input: bool = False, use_cache: bool = True,
    ) -> None:
        super().__init__()
        self.embed = embed
        self.word_input = word_input
        self.region_input = region_input
        self.pooled_input = pooled_input
        self.attention_lstm = attention_lstm
        self.attention = attention
        self.language_lstm = language_lstm
        self.dropout = Dropout(dropout)
        self.output = output
        self.box_input = box_input
        self.use_cache = use_cache

    @property
    def word_embeddings(self) -> nn.Embedding:
        """The word embedding table (V, E) (data-dependent initialisation reads it)."""
        return self.embed

    def read_regions(self, inputs: ModelInputs) -> Regions:
        """The regions of ``inputs`` (features (B,N,D), boxes (B,N,4) normalised, region_mask (B,N))."""
        features, boxes, mask = inputs["features"], inputs["boxes"], inputs["region_mask"]
        if self.box_input:
            features = with_box_channels(features, boxes)  # (B, N, D + 5)
        pooled = self.pooled_input(masked_mean(features, mask))  # (B, Dp)
        return Regions(self.region_input(features), mask, pooled, BoxGeometry(boxes, mask))

    def initial_states(self, regions: Regions, rows: int) -> LSTMStates:
        """Zero states of both LSTMs for ``rows`` decoding rows."""
        zeros = regions.pooled.new_zeros(rows, self.attention_lstm.hidden_size)  # (R, M)
        return LSTMStates((zeros, zeros), (zeros, zeros))

    def cell(
        self, words: Tensor, states: LSTMStates, regions: Regions, cache: KeyValueSource | None
    ) -> tuple[Tensor, LSTMStates]:
        """One time step for the input ``words`` (R,) of R = B g decoding rows (grouped image by image, B the
        images of ``regions``): h^2_t (R, M) and the new states."""
        images = regions.pooled.shape[0]
        embedded = self.word_input(self.embed(words))  # (R, E)
        pooled = regions.pooled.repeat_interleave(words.shape[0] // images, dim=0)  # (R, Dp)
        h1, c1 = self.attention_lstm(torch.cat([states.language[0], pooled, embedded], dim=-1), states.attention)
        context = AttentionContext(Site.CROSS, geometry=regions.geometry)
        attended = self.attention(
            per_image(h1[:, None], images), regions.features, regions.features, mask=regions.mask[:, None, None, :],
            cache=cache, context=context,
        ).out  # (B, g, out_dim): an image's rows as one block of queries
        h2, c2 = self.language_lstm(torch.cat([attended.reshape(h1.shape[0], -1), h1], dim=-1), states.language)
        return h2, LSTMStates((h1, c1), (h2, c2))

    def run(self, tokens: Tensor, regions: Regions, cache: KeyValueSource | None) -> Tensor:
        """h^2 (R, T, M) for the input ``tokens`` (R, T) (R = B g rows) from the zero state."""
        states, hidden = self.initial_states(regions, tokens.shape[0]), []
        for t in range(tokens.shape[1]):
            h2, states = self.cell(tokens[:, t], states, regions, cache)
            hidden.append(h2)
        return torch.stack(hidden, dim=1)

    def forward(self, inputs: ModelInputs, tokens: Tensor) -> Tensor:
        """Teacher forcing: input ``tokens`` (B, T) -> logits (B, T, V); per-image projections computed once."""
        return self.output(self.dropout(self.run(tokens, self.read_regions(inputs), self.attention_cache())))

    def attention_cache(self) -> KeyValueSource:
        """An empty compute-once cache of the top-down site (with the mechanism's own parts, e.g. CATT's)."""
        return site_cache(self.attention, StaticKVCache())

    def encode(self, inputs: ModelInputs, use_cache: bool | None = None) -> UpDownState:
        """State for decoding (with a cache unless ``use_cache`` is False, default ``self.use_cache``)."""
        regions = self.read_regions(inputs)
        caching = self.use_cache if use_cache is None else use_cache
        rows = regions.pooled.shape[0]
        return UpDownState(regions, UpDownCache(self.initial_states(regions, rows), self.attention_cache()) if caching
                           else None)

    @property
    def output_projection(self) -> nn.Linear:
        """The vocabulary projection (V, M): the language LSTM's state (after dropout) -> logits."""
        return self.output

    def step_features(self, tokens: Tensor, state: UpDownState) -> tuple[Tensor, UpDownState]:
        """What :attr:`output_projection` reads for the next token after ``tokens`` (R, t) (BOS first; R = B g
        rows): the language LSTM's h^2 (R, M) after dropout; and the new state."""
        cache = state.cache
        if cache is None:
            return self.dropout(self.run(tokens, state.regions, None)[:, -1]), state
        if tokens.shape[1] != cache.steps + 1:
            raise ValueError(f"step: the state has consumed {cache.steps} tokens, so it needs {cache.steps + 1}, "
                             f"got {tokens.shape[1]}")
        hidden, lstm = self.cell(tokens[:, -1], cache.lstm, state.regions, cache.attention)
        return self.dropout(hidden), UpDownState(state.regions, UpDownCache(lstm, cache.attention, cache.steps + 1),
                                                 state.group)

    def step(self, tokens: Tensor, state: UpDownState) -> tuple[Tensor, UpDownState]:
        """Log-probabilities (R, V) of the next token after ``tokens`` (R, t) (BOS first; R = B g rows), a new
        tensor; and the new state."""
        features, state = self.step_features(tokens, state)
        return self.output_projection(features).log_softmax(dim=-1), state

    def reorder(self, state: UpDownState, index: Tensor) -> UpDownState:
        """Decoding rows ``index`` (B g',) of ``state`` (B g rows): row r of the result continues row ``index[r]``,
        which must belong to the same image. Only the LSTM states are gathered; the regions and the attention's
        cache stay once per image."""
        group = regroup(index, state.regions.pooled.shape[0], state.group)
        cache = state.cache
        if cache is not None:
            cache = UpDownCache(reorder_state(cache.lstm, index), cache.attention, cache.steps)
        return UpDownState(state.regions, cache, group)

    def select_images(self, state: UpDownState, images: Tensor) -> UpDownState:
        """The state of images ``images`` (B',) (increasing indices) with all their decoding rows: their regions and
        the top-down attention's compute-once cache, the LSTM states of their rows (decoders that skip finished
        images, :mod:`vlattn.decoding.active`)."""
        cache = state.cache
        if cache is not None:
            rows = image_rows(images, state.group)  # (B' g,)
            cache = UpDownCache(reorder_state(cache.lstm, rows), reorder_state(cache.attention, images), cache.steps)
        return UpDownState(reorder_state(state.regions, images), cache, state.group)


def embedding_layer(input_dim: int, output_dim: int, dropout: float) -> nn.Sequential:
    """self-critical.pytorch's feature embeddings: Linear + ReLU + dropout."""
    return nn.Sequential(nn.Linear(input_dim, output_dim), nn.ReLU(), Dropout(dropout))


@dataclass
class VariantParts:
    """The variant-specific parts: word, region and pooled-feature inputs and the sizes they produce."""

    word_input: nn.Module
    region_input: nn.Module
    pooled_input: nn.Module
    region_dim: int
    pooled_dim: int


def paper_parts(feature_dim: int, hidden: int, dropout: float, embed_dropout: float | None) -> VariantParts:
    """Raw features and their mean (Eq. 2-6; the released Caffe code); the embedded words as they are unless
    ``embed_dropout`` is set."""
    word_input = nn.Identity() if not embed_dropout else Dropout(embed_dropout)
    return VariantParts(word_input, nn.Identity(), nn.Identity(), feature_dim, feature_dim)


def self_critical_parts(feature_dim: int, hidden: int, dropout: float, embed_dropout: float | None) -> VariantParts:
    """self-critical.pytorch: ReLU + dropout after the word embedding (``embed_dropout``, default ``dropout``),
    embedded regions and pooled feature."""
    return VariantParts(
        nn.Sequential(nn.ReLU(), Dropout(first_set(embed_dropout, dropout))),
        embedding_layer(feature_dim, hidden, dropout),  # att_embed
        embedding_layer(feature_dim, hidden, dropout),  # fc_embed
        hidden,
        hidden,
    )


VARIANTS: dict[str, Callable[[int, int, float, float | None], VariantParts]] = {
    "paper": paper_parts,
    "self_critical": self_critical_parts,
}


def top_down_attention(cfg: ModelConfig, attention_dim: int, query_dim: int, key_dim: int,
                       box_channels: int = 0, score_bias: bool = False) -> nn.Module:
    """The mechanism of ``model.decoder_cross_attention`` at the top-down site (queries: the attention LSTM's
    h^1 (``query_dim``), keys and values: the regions (``key_dim``), whose last ``box_channels`` are
    ``model.box_input``'s box channels: a mechanism with a global dictionary (BUTD+CATT) is told, so its entries
    keep the raw feature width and zero box channels); refused with a ``ConfigError`` unless it takes queries of
    another size than its keys and its capabilities allow a cross site with box geometry. ``score_bias``: the
    default of ``additive``'s ``score_bias`` option (the ``self_critical`` variant's ``alpha_net`` has a bias; an
    explicit option in the config wins)."""
    spec, where = getattr(cfg, TOP_DOWN_SITE), f"model.{TOP_DOWN_SITE}"
    if not attention_class(spec.name, where).capabilities.query_dim_differs:
        raise ConfigError(
            f"{where}: the Up-Down top-down site needs a mechanism that takes queries of another size than its keys "
            f"(e.g. additive, stacked, sla); {spec.name!r} does not"
        )
    dims = AttentionDims(attention_dim, cfg.num_heads, first_set(cfg.attention_dropout, 0.0), query_dim, key_dim)
    check_placement(spec.name, dims, site=Site.CROSS, where=where, has_geometry=True, options=spec.options)
    options = {"score_bias": score_bias, **spec.options} if spec.name == "additive" else spec.options
    attention = build_attention(
        spec.name, d_model=attention_dim, num_heads=cfg.num_heads, dropout=dims.dropout, query_dim=query_dim,
        key_dim=key_dim, options=options, where=where,
    )
    if box_channels and isinstance(attention, CausalAttention):
        attention.zero_key_channels(box_channels)
    return attention


def build_updown(cfg: ModelConfig, vocab_size: int, pad_id: int = 0) -> UpDownCaptioner:
    """The Up-Down captioner described by ``cfg``: it reads ``feature_dim``, ``d_model`` (M), ``dropout``,
    ``box_input``, ``tie_embeddings``, ``output_bias``, the top-down site ``decoder_cross_attention`` and
    ``options`` (:class:`UpDownOptions`); the other keys configure Transformer stacks."""
    options = parse_options(UpDownOptions, cfg.options, "model.options")
    hidden = cfg.d_model
    if cfg.tie_embeddings and options.embed_dim != hidden:
        raise ConfigError(
            f"model.tie_embeddings: the output layer ({hidden}) and the word embedding "
            f"(model.options.embed_dim = {options.embed_dim}) must have one size"
        )
    feature_dim = cfg.feature_dim + (BOX_CHANNELS if cfg.box_input else 0)
    parts = VARIANTS[options.variant](feature_dim, hidden, cfg.dropout, cfg.embedding_dropout)
    embed = nn.Embedding(vocab_size, options.embed_dim, padding_idx=pad_id)
    attention_lstm = nn.LSTMCell(hidden + parts.pooled_dim + options.embed_dim, hidden)
    raw_regions = options.variant == "paper"  # self_critical attends embedded regions: no box channels at the site
    box_channels = BOX_CHANNELS if cfg.box_input and raw_regions else 0
    attention = top_down_attention(cfg, options.attention_dim, hidden, parts.region_dim, box_channels,
                                   score_bias=options.variant == "self_critical")
    language_lstm = nn.LSTMCell(attention.out_dim + hidden, hidden)
    output = nn.Linear(hidden, vocab_size, bias=cfg.output_bias)
    if cfg.tie_embeddings:
        output.weight = embed.weight
    return UpDownCaptioner(
        embed, parts.word_input, parts.region_input, parts.pooled_input, attention_lstm, attention, language_lstm,
        output, cfg.dropout, box_input=cfg.box_input,
    )
