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

Decoder positions are the sinusoidal encodings the paper describes (Sec. 4.2), not trainable and not saved.
In the released code they are a *frozen random matrix*: the position table is an ``nn.Embedding`` built from
the sinusoid table with ``freeze=True``, and the model-wide pass that re-initialises every parameter with
more than one dimension by Xavier-uniform overwrites it (and the memory slots, see
:mod:`vlattn.attention.memory`). That table (max_len + 1 = 55 rows x 512) is the only difference between
its decoder parameter count and ours: 27,809,280 = 27,781,120 trainable + 28,160 frozen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from vlattn.attention import Site
from vlattn.config import ModelConfig, parse_options
from vlattn.errors import ConfigError
from vlattn.models.meshed import MeshedCrossAttention
from vlattn.models.transformer import Parts, TransformerCaptioner, encoder_decoder

# connectivity -> the encoder levels decoder layer ``layer`` attends, given ``levels`` encoder layers
CONNECTIVITY: dict[str, Callable[[int, int], list[int]]] = {
    "meshed": lambda layer, levels: list(range(levels)),
    "one_to_one": lambda layer, levels: [layer],
}


@dataclass
class M2Options:
    """``model.options`` of kind ``m2`` (see the module docstring)."""

    connectivity: Literal["meshed", "one_to_one"] = "meshed"
    gating: Literal["sigmoid", "softmax"] = "sigmoid"


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
    return options


def build_m2(cfg: ModelConfig, vocab_size: int, pad_id: int = 0) -> TransformerCaptioner:
    """The M2 captioner described by ``cfg`` (see the module docstring for its options)."""
    options = m2_options(cfg)
    connect = CONNECTIVITY[options.connectivity]
    parts = Parts(cfg)

    def meshed_site(layer: int) -> MeshedCrossAttention:
        levels = connect(layer, cfg.encoder_layers)
        attention = parts.attention("decoder_cross_attention", Site.CROSS)
        return MeshedCrossAttention(attention, parts.norm(), cfg.d_model, levels, options.gating)

    return encoder_decoder(parts, vocab_size, pad_id, meshed_site)
