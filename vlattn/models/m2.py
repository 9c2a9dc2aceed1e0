"""The Meshed-Memory Transformer captioner (Cornia et al. 2020, Sec. 3, Fig. 2; ablations of Table 1 and
supplementary Tables 6-7), assembled from the shared stacks:

- encoder: :class:`~vlattn.models.encoder.TransformerEncoder` whose self-attention is the registered
  mechanism of ``encoder_self_attention`` — ``{name: memory, options: {slots: 40}}`` for M2 (Eq. 3-5),
  ``{name: mha}`` for the "w/o memory" ablation, ``slots`` for Table 6; it returns every layer's output;
- decoder: :class:`~vlattn.models.decoder.TransformerDecoder` whose cross-attention sites are
  :class:`~vlattn.models.meshed.MeshedCrossAttention` (Eq. 6-9), one shared attention per decoder layer.

``ModelConfig.options`` of kind ``m2`` (:class:`M2Options`):

- ``connectivity``: ``meshed`` (decoder layer i attends every encoder level) or ``one_to_one`` (decoder
  layer i attends encoder level i only; Table 1 "1-to-1"; it keeps its single gate so that the variant
  differs only in connectivity — with the gate at 1 it is the plain cross-attention to level i);
- ``gating``: ``sigmoid`` (Eq. 8) or ``softmax`` across levels (Table 1 "w/ softmax").

The numbers of encoder and decoder layers are free (Table 7); the official code hard-codes three gates and
reads levels 0-2 only, silently ignoring any further encoder layer.

The released code (aimagelab/meshed-memory-transformer) differs from the paper in four documented ways;
each is an option whose default is the paper reading and whose ``official`` value reproduces the code
exactly (``vlattn/presets/m2-official.yaml`` sets them all; ``vlattn import-checkpoint --format m2-official``
writes them into an imported model's config). ``positions``, ``padding`` and ``init`` belong to the code base, which
the released LW-Transformer captioning code reuses: kind ``transformer`` offers them too
(:mod:`vlattn.models.released`).

- ``residual``: ``paper`` | ``official`` — where the meshed cross-attention's AddNorm sits (see
  :mod:`vlattn.models.meshed`, beside Eq. 9). Dropout: Sec. 4.2 places it "after each attention and
  feed-forward layer", and the released code has none on the attention weights or on the summed word +
  position embeddings either, so by default neither mode has those two (``model.attention_dropout`` and
  ``model.embedding_dropout`` add them). The other dropouts are in the same places in both: after the input
  projection's ReLU, inside the feed-forward after its ReLU, and on every sub-layer output before its
  residual (``official``: one per encoder level in the meshed cross-attention, drawn in one call over the
  stacked levels) — 22 dropout calls per 3 + 3-layer XE forward (the released code's 28 modules).
- ``positions``: ``sinusoidal`` (Sec. 4.2; fixed, not saved) | ``table``: the released model's frozen
  (max_positions + 1) x d table (55 x 512 there, ``max_positions: 54``), row 0 reserved for padding, the
  first input token (BOS) at row 1. It is a saved buffer (no gradient, not counted as a parameter, in
  ``model.safetensors``), so imported rows survive save/load. In the released code the table is built from
  sinusoids and then overwritten by the model-wide Xavier pass, i.e. it is a frozen *random* matrix.
- ``padding``: ``regions`` (``region_mask``; padded regions are never attended) | ``official``: as the
  released data loader, every image is zero-padded to ``padded_regions`` (default 50) rows, and the encoder
  derives its mask from ``sum(LayerNorm(x)) == 0`` after the input projection, which for a trained model
  masks nothing (and at initialisation whichever rows rounding sums to exactly 0; see
  :class:`~vlattn.models.encoder.TransformerEncoder`); the decoder masks pad tokens as
  self-attention keys and zeroes their states (see :class:`~vlattn.models.decoder.TransformerDecoder`).
- ``init``: ``paper`` | ``official``: after every module's own initialisation, Xavier-uniform on every
  saved tensor with more than one dimension, as the released ``Transformer.init_weights`` (the word
  embedding then has std ~0.014 instead of 1; the feed-forward, input projection and output layer lose
  PyTorch's default Kaiming-uniform). The memory slots are drawn by the memory attention's own
  ``init: official`` (Xavier over the released (1, m, d) layout), which this option therefore requires.

Parameter count: the released table (55 x 512 = 28,160 values) is the only difference between its decoder
count and ours: 27,809,280 = 27,781,120 trainable + 28,160 frozen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from vlattn.attention import Site
from vlattn.config import ModelConfig, parse_options
from vlattn.errors import ConfigError
from vlattn.models.meshed import MeshedCrossAttention
from vlattn.models.released import ReleasedCodeOptions
from vlattn.models.transformer import Parts, TransformerCaptioner, encoder_decoder

# connectivity -> the encoder levels decoder layer ``layer`` attends, given ``levels`` encoder layers
CONNECTIVITY: dict[str, Callable[[int, int], list[int]]] = {
    "meshed": lambda layer, levels: list(range(levels)),
    "one_to_one": lambda layer, levels: [layer],
}


@dataclass
class M2Options(ReleasedCodeOptions):
    """``model.options`` of kind ``m2`` (see the module docstring); ``positions``, ``padding``, ``padded_regions``
    and ``init`` are the released code base's (:class:`~vlattn.models.released.ReleasedCodeOptions`)."""

    connectivity: Literal["meshed", "one_to_one"] = "meshed"
    gating: Literal["sigmoid", "softmax"] = "sigmoid"
    residual: Literal["paper", "official"] = "paper"


def m2_options(cfg: ModelConfig) -> M2Options:
    """``cfg.options`` validated (unknown keys and names list the valid ones)."""
    options = parse_options(M2Options, cfg.options, "model.options")
    if options.connectivity == "one_to_one" and cfg.decoder_layers > cfg.encoder_layers:
        raise ConfigError(
            f"model.options.connectivity: one_to_one needs decoder_layers ({cfg.decoder_layers}) "
            f"<= encoder_layers ({cfg.encoder_layers})"
        )
    if cfg.encoder_layers < 1:
        raise ConfigError("model.encoder_layers: M2's meshed decoder needs at least one encoder layer")
    options.check_memory_init(cfg)
    return options


def build_m2(cfg: ModelConfig, vocab_size: int, pad_id: int = 0) -> TransformerCaptioner:
    """The M2 captioner described by ``cfg`` (see the module docstring for its options)."""
    options = m2_options(cfg)
    connect = CONNECTIVITY[options.connectivity]
    # Sec. 4.2: dropout "after each attention and feed-forward layer"; none on the attention weights or the
    # embeddings (nor in the released code) unless model.attention_dropout / model.embedding_dropout ask for it
    parts = Parts(cfg, attention_dropout=0.0)

    def meshed_site(layer: int) -> MeshedCrossAttention:
        levels = connect(layer, cfg.encoder_layers)
        attention = parts.attention("decoder_cross_attention", Site.CROSS)
        return MeshedCrossAttention(
            attention, parts.norm(), cfg.d_model, levels, options.gating, residual=options.residual
        )

    return encoder_decoder(parts, vocab_size, pad_id, meshed_site, released=options, embed_dropout=0.0)
