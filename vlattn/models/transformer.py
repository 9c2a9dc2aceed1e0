"""The Transformer captioner: SAN of NG-SAN Sec. 3.2 (Fig. 1) / the Transformer baseline of the M2 paper
(Sec. 4.3), assembled from injected parts: the attention of each site and the feed-forward come from their
registries, so mechanisms plug in by configuration.

Generation interface (decoding code never looks inside): ``encode(inputs)`` -> :class:`TransformerState`,
``step`` -> next-token log-probabilities (a new tensor, owned by the caller), ``reorder`` -> state rows for beams;
``step`` is ``log_softmax(output_projection(step_features(...)))``, the split that decoding wrappers such as
:class:`~vlattn.decoding.packed.PackedOutput` use. ``inputs`` is a mapping with
``features`` (B, N, D), ``boxes`` (B, N, 4) normalised x1y1x2y2 and ``region_mask`` (B, N) bool. With
``use_cache`` the state carries key/value caches (self-attention appended step by step, cross-attention
projected once per image); without it, ``step`` re-runs the decoder over the whole prefix.

The encoded memories and the cross-attention caches stay at one row per image for the whole search; only the
self-attention caches have one row per decoding row (R = B g: g beams or samples per image, grouped image by
image). ``reorder(state, index)`` therefore requires ``index`` to keep every row with its image (what beam search
and sampling do: expanding each image to g rows, choosing among an image's own beams) and gathers only the
self-attention caches, one gather per layer.

``ModelConfig.options`` of kind ``transformer`` (:class:`TransformerOptions`) reproduce the released LW-Transformer
captioning code (luogen1996/LWTransformer, ``ImageCaptioning/models/transformer_lightweight``; its dense twin
``transformer_official`` is the same with plain attention and feed-forward), each default being the paper reading
(``vlattn/presets/lw-transformer-official.yaml`` sets them all):

- ``residual``: ``paper`` | ``official``: every attention sub-layer (encoder self, decoder self and cross) wrapped in
  residual + LayerNorm twice, LN_b(x + dropout(LN_a(x + dropout(attention)))) (:class:`~vlattn.layers.DoublePostNorm`):
  the released ``LMultiHeadAttention`` already returns LN_a(q + dropout(attention)) and ``EncoderLayer.lnorm`` /
  ``DecoderLayer.lnorm1``/``lnorm2`` add LN_b. One more LayerNorm (2 d parameters) per attention sub-layer:
  (L_enc + 2 L_dec) x 2 d, 18 x 1,024 = 18,432 at 6 + 6 layers and d = 512. The feed-forward keeps one.
- ``positions``, ``padding``, ``padded_regions``, ``init``: the M2 code base's, which the LW code reuses
  (:mod:`vlattn.models.released`): its frozen position table, zero-padding to 50 regions with the mask from the
  activations and pad tokens masked in the decoder, and Xavier on every saved matrix.

The other differences from the paper are model-wide keys or attention/feed-forward options:
``model.attention_dropout: 0.1`` (``LScaledDotProductAttention`` drops the attention weights; the kind's default
follows Vaswani et al.: none), ``model.embedding_dropout: 0`` (``word_emb + pos_emb``, no dropout; default
``dropout``), ``max_positions: 54``, ``output_bias: false`` (``decoder.fc``), and ``group_merge: true`` at the
``gmha`` sites: the released attention applies one shared Linear per group to the queries, keys, values *and* the
merge (G-LML), where the paper keeps a dense merge (:mod:`vlattn.attention.groupwise`).

Checked to agree (``tests/models/test_lw_official.py`` against ``tests/lw_released.py``, to 1e-5): the encoder's
input projection (``fc``, ReLU, dropout, LayerNorm: :func:`~vlattn.models.encoder.region_projection`) and its
last layer as the decoder's memory; the group-wise projections (contiguous channel groups, heads group by group,
logits / sqrt(d_k) with d_k = 64 for 1x and 192 = expansion 3 for 3x, values d / h); G-FFN (dense ``fc1``, one
``fc2`` d_f/k -> d/k over contiguous hidden groups: ``gffn`` with ``share_weights``); the dropout positions (input
projection, feed-forward inside and output, both residuals of the doubled norm, attention weights); and the decoder's
pad handling: the released layers multiply pad positions' states by 0 after every sub-layer, ours zero only the
final states, which gives the same outputs because a pad position is never attended as a key (its intermediate
states reach no other position) and its first key, BOS, is real. The released ``--head`` flag and its encoder's
``attention_module_kwargs`` never reach the model (8 heads always).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from torch import Tensor, nn

from vlattn.attention import AttentionDims, Site, build_attention, check_placement
from vlattn.attention.cache import reorder_state
from vlattn.config import ModelConfig, parse_options
from vlattn.errors import ConfigError
from vlattn.layers import DoublePostNorm, PostNorm, build_feed_forward
from vlattn.layers.boxes import BOX_CHANNELS, SinusoidalBoxEncoding, with_box_channels
from vlattn.layers.rows import image_rows
from vlattn.models.decoder import CrossAttentionSite, DecoderLayer, TransformerDecoder, regroup
from vlattn.models.encoder import EncoderLayer, Memory, TransformerEncoder, region_projection
from vlattn.models.released import ReleasedCodeOptions

ModelInputs = Mapping[str, Tensor]


@dataclass
class TransformerState:
    """Decoding state: the encoded ``memories`` (name -> :class:`Memory`, B images) and, when caching, the caches
    of each decoder layer (a :class:`~vlattn.models.decoder.LayerCache`; two-stream decoders hold one per stream,
    each with a ``reorder(index)`` that gathers only what follows the decoding rows), extended in place by
    ``step``; ``group`` g, the decoding rows per image (``step`` takes B g rows, grouped image by image)."""

    memories: dict[str, Memory]
    cache: list[Any] | None = None
    group: int = 1

    @property
    def images(self) -> int:
        """B, the number of images."""
        return next(iter(self.memories.values())).mask.shape[0]


class TransformerCaptioner(nn.Module):
    """Encoder-decoder captioner over region features; see the module docstring for the state protocol."""

    def __init__(
        self, encoder: TransformerEncoder, decoder: TransformerDecoder, use_cache: bool = True, box_input: bool = False
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.use_cache = use_cache
        self.box_input = box_input

    @property
    def word_embeddings(self) -> nn.Embedding:
        """The word embedding table (V, d) (data-dependent initialisation reads it)."""
        return self.decoder.embed

    def encoder_inputs(self, inputs: ModelInputs) -> tuple[Tensor, Tensor, Tensor]:
        """``features`` (B, N, D) — (B, N, D + 5) with ``box_input``, the normalised boxes joining them —, ``boxes``
        (B, N, 4) and ``region_mask`` (B, N)."""
        features, boxes, region_mask = inputs["features"], inputs["boxes"], inputs["region_mask"]
        if self.box_input:
            features = with_box_channels(features, boxes)  # (B, N, D + 5)
        return features, boxes, region_mask

    def memories(self, inputs: ModelInputs) -> dict[str, Memory]:
        """Encode the regions: ``{"regions": Memory}``."""
        return {"regions": self.encoder(*self.encoder_inputs(inputs))}

    def forward(self, inputs: ModelInputs, tokens: Tensor) -> Tensor:
        """Teacher forcing: input ``tokens`` (B, T) -> logits (B, T, V)."""
        return self.decoder(tokens, self.memories(inputs))

    def encode(self, inputs: ModelInputs, use_cache: bool | None = None) -> TransformerState:
        """State for decoding; caches (default ``self.use_cache``) are updated in place by ``step``."""
        caching = self.use_cache if use_cache is None else use_cache
        return TransformerState(self.memories(inputs), self.decoder.new_cache() if caching else None)

    @property
    def output_projection(self) -> nn.Linear:
        """The vocabulary projection (V, F): the decoder's final states (the fused streams for CATT) -> logits."""
        return self.decoder.output

    def step_features(self, tokens: Tensor, state: TransformerState) -> tuple[Tensor, TransformerState]:
        """What :attr:`output_projection` reads for the next token after ``tokens`` (B, t) (BOS first): the last
        position's final decoder states (B, F); and the state."""
        if state.cache is not None:
            hidden = self.decoder.hidden(tokens, state.memories, state.cache, tokens.shape[1] - 1)
        else:
            hidden = self.decoder.hidden(tokens, state.memories)
        return hidden[:, -1], state

    def step(self, tokens: Tensor, state: TransformerState) -> tuple[Tensor, TransformerState]:
        """Log-probabilities (B, V) of the next token after ``tokens`` (B, t) (BOS first), a new tensor; and the
        state."""
        features, state = self.step_features(tokens, state)
        return self.output_projection(features).log_softmax(dim=-1), state

    def reorder(self, state: TransformerState, index: Tensor) -> TransformerState:
        """Decoding rows ``index`` (B g',) of ``state`` (B g rows): row r of the result continues row ``index[r]``,
        which must belong to the same image (image of row r = r // g'). Only the self-attention caches are
        gathered (each layer's ``reorder``); memories and cross-attention caches stay once per image."""
        group = regroup(index, state.images, state.group)
        cache = None if state.cache is None else [layer.reorder(index) for layer in state.cache]
        return TransformerState(state.memories, cache, group)

    def select_images(self, state: TransformerState, images: Tensor) -> TransformerState:
        """The state of images ``images`` (B',) (increasing indices) with all their decoding rows: memories and
        cross-attention caches of those images, self-attention caches of their rows (decoders that skip finished
        images, :mod:`vlattn.decoding.active`)."""
        rows = image_rows(images, state.group)  # (B' g,)
        cache = None if state.cache is None else [layer.select(rows, images) for layer in state.cache]
        return TransformerState(reorder_state(state.memories, images), cache, state.group)

    def backbone_layers(self) -> list[nn.Module]:
        """The encoder and decoder layers: what the LW-Transformer paper counts (no embeddings, input
        projection or output layer)."""
        return [*self.encoder.layers, *self.decoder.layers]


def first_set(*values: float | None) -> float:
    """The first value that is not None (a config key, then the kind's default, then the model-wide value)."""
    return next(value for value in values if value is not None)


@dataclass
class Parts:
    """Builds the parts of a Transformer-family model from ``cfg``: each site's attention (validated against
    the mechanism's capabilities, errors naming ``model.<site>``), feed-forwards and norms.
    ``attention_dropout``: the kind's default dropout on the attention weights when ``cfg.attention_dropout`` is
    None (None here: ``cfg.dropout``). ``double_attention_norm``: every attention sub-layer (encoder self,
    decoder self, plain cross site) wrapped in residual + LayerNorm twice (:class:`~vlattn.layers.DoublePostNorm`,
    the released LW-Transformer captioning code); the feed-forward keeps one."""

    cfg: ModelConfig
    use_cache: bool = True
    attention_dropout: float | None = None
    double_attention_norm: bool = False

    @property
    def dropout(self) -> float:
        """The attention dropout: ``cfg.attention_dropout``, else the kind's ``attention_dropout``, else
        ``cfg.dropout``."""
        return first_set(self.cfg.attention_dropout, self.attention_dropout, self.cfg.dropout)

    def check(self, site_key: str, site: Site, *, has_geometry: bool = False, cached: bool = False,
              query_dim: int | None = None, key_dim: int | None = None) -> None:
        """Refuse the mechanism of ``model.<site_key>`` at a site of kind ``site`` unless its capabilities allow it."""
        spec, cfg = getattr(self.cfg, site_key), self.cfg
        dims = AttentionDims(cfg.d_model, cfg.num_heads, self.dropout, query_dim, key_dim)
        check_placement(spec.name, dims, site=site, where=f"model.{site_key}", has_geometry=has_geometry, cached=cached,
                        options=spec.options)

    def attention(self, site_key: str, site: Site, *, has_geometry: bool = False, cached: bool = False,
                  query_dim: int | None = None, key_dim: int | None = None) -> nn.Module:
        """The mechanism configured at ``model.<site_key>`` for a site of kind ``site``; its output must have the
        model's width (the residual adds it to the queries)."""
        self.check(site_key, site, has_geometry=has_geometry, cached=cached, query_dim=query_dim, key_dim=key_dim)
        spec, cfg, where = getattr(self.cfg, site_key), self.cfg, f"model.{site_key}"
        module = build_attention(
            spec.name, d_model=cfg.d_model, num_heads=cfg.num_heads, dropout=self.dropout, query_dim=query_dim,
            key_dim=key_dim, options=spec.options, where=where,
        )
        if module.out_dim != cfg.d_model:
            raise ConfigError(
                f"{where}: attention {spec.name!r} returns {module.out_dim}-d outputs, but a Transformer layer adds "
                f"them to its {cfg.d_model}-d queries (for catt: options.fusion: concat_linear)"
            )
        return module

    def feed_forward(self) -> nn.Module:
        spec = self.cfg.feed_forward
        return build_feed_forward(spec.name, self.cfg.d_model, self.cfg.d_ff, self.cfg.dropout, spec.options,
                                  where="model.feed_forward")

    def norm(self) -> PostNorm:
        return PostNorm(self.cfg.d_model, self.cfg.dropout)

    def attention_norm(self) -> nn.Module:
        """The residual + norm of an attention sub-layer: (x, attended) -> (B, N, d)."""
        if self.double_attention_norm:
            return DoublePostNorm(self.cfg.d_model, self.cfg.dropout)
        return self.norm()

    def box_encoding(self) -> nn.Module | None:
        """The absolute box encoding added to the encoder input (``model.box_encoding``), or None."""
        if self.cfg.box_encoding == "none":
            return None
        if self.cfg.d_model % 4:
            raise ConfigError(f"model.box_encoding: 'sinusoidal' needs d_model divisible by 4, got {self.cfg.d_model}")
        return SinusoidalBoxEncoding(self.cfg.d_model)

    def encoder_layer(self, site: Site = Site.ENCODER_SELF) -> EncoderLayer:
        """An encoder layer whose attention (``model.encoder_self_attention``) serves sites of kind ``site``."""
        attention = self.attention("encoder_self_attention", site, has_geometry=site is Site.ENCODER_SELF)
        return EncoderLayer(attention, self.feed_forward(), self.attention_norm(), self.norm())

    def cross_site(self, layer: int) -> nn.Module:
        """The plain cross-attention site: the last level of the region memory."""
        return CrossAttentionSite(self.attention("decoder_cross_attention", Site.CROSS), self.attention_norm())

    def decoder_layers(self, make_cross_site: Callable[[int], nn.Module]) -> list[DecoderLayer]:
        """``decoder_layers`` layers; parameters are created in the order self-attention, cross site,
        feed-forward (so a seed gives the same weights as before the parts were injected)."""
        layers = []
        for i in range(self.cfg.decoder_layers):
            attention = self.attention("decoder_self_attention", Site.DECODER_SELF, cached=self.use_cache)
            cross = make_cross_site(i)
            layers.append(DecoderLayer(attention, self.attention_norm(), cross, self.feed_forward(), self.norm()))
        return layers


@dataclass
class TransformerOptions(ReleasedCodeOptions):
    """``model.options`` of kind ``transformer``: ``residual`` (``paper`` | ``official``: every attention sub-layer
    wrapped in residual + LayerNorm twice) and the released code base's ``positions``, ``padding``,
    ``padded_regions``, ``init`` (:class:`~vlattn.models.released.ReleasedCodeOptions`); see the module docstring."""

    residual: Literal["paper", "official"] = "paper"


def build_transformer(cfg: ModelConfig, vocab_size: int, pad_id: int = 0) -> TransformerCaptioner:
    """The Transformer captioner described by ``cfg``."""
    options = parse_options(TransformerOptions, cfg.options, "model.options")
    options.check_memory_init(cfg)
    # Vaswani et al. Sec. 5.4: residual and embedding dropout only
    parts = Parts(cfg, attention_dropout=0.0, double_attention_norm=options.residual == "official")
    return encoder_decoder(parts, vocab_size, pad_id, parts.cross_site, released=options)


def encoder_decoder(
    parts: Parts, vocab_size: int, pad_id: int, make_cross_site: Callable[[int], nn.Module], *,
    released: ReleasedCodeOptions | None = None, embed_dropout: float | None = None,
) -> TransformerCaptioner:
    """Encoder and decoder stacks of ``parts.cfg`` with the cross-attention site of decoder layer i from
    ``make_cross_site(i)`` (the extension point of model kinds that differ there, e.g. M2).

    ``released``: the M2 code base's positions, padding rules and initialisation
    (:class:`~vlattn.models.released.ReleasedCodeOptions`; None = their paper defaults: sinusoidal positions,
    the region mask, each module's own initialisation); ``embed_dropout``: the kind's default dropout on the
    summed word and position embeddings when ``cfg.embedding_dropout`` is None (None here: ``cfg.dropout``).
    """
    cfg, released = parts.cfg, released or ReleasedCodeOptions()
    input_dim = cfg.feature_dim + (BOX_CHANNELS if cfg.box_input else 0)
    encoder = TransformerEncoder(
        region_projection(input_dim, cfg.d_model, cfg.dropout),
        [parts.encoder_layer() for _ in range(cfg.encoder_layers)],
        parts.box_encoding(),
        released_padding=released.released_padding,
    )
    embed = nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_id)
    layers = parts.decoder_layers(make_cross_site)
    output = nn.Linear(cfg.d_model, vocab_size, bias=cfg.output_bias)
    if cfg.tie_embeddings:
        output.weight = embed.weight
    positions = released.position_module(cfg.d_model, cfg.max_positions)
    dropout = first_set(cfg.embedding_dropout, embed_dropout, cfg.dropout)
    decoder = TransformerDecoder(embed, positions, layers, output, dropout,
                                 None if released.released_padding is None else pad_id)
    model = TransformerCaptioner(encoder, decoder, use_cache=parts.use_cache, box_input=cfg.box_input)
    released.initialise(model)
    return model
