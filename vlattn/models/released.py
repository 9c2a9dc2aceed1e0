"""The options shared by the captioners whose authors released code built on the M2 code base
(aimagelab/meshed-memory-transformer): kind ``m2`` (that code itself) and kind ``transformer`` (the released
LW-Transformer captioning code, luogen1996/LWTransformer ``ImageCaptioning``, which reuses its containers, data
loader, decoder input and ``Transformer.init_weights``). Each option's default is the paper reading; its other
value reproduces the released code:

- ``positions``: ``sinusoidal`` (fixed, not saved) | ``table``: the released frozen (max_positions + 1) x d table
  (:class:`~vlattn.layers.PositionTable`; row 0 reserved for padding, BOS at row 1), a saved buffer — built from
  sinusoids and then overwritten by the model-wide Xavier pass in the released code, i.e. a frozen *random* matrix;
- ``padding``: ``regions`` (``region_mask``) | ``official``: every image zero-padded to ``padded_regions`` rows and
  the encoder's mask derived from ``sum(x) == 0`` after the input projection
  (:class:`~vlattn.models.encoder.TransformerEncoder`); the decoder masks pad tokens as self-attention keys and
  zeroes their states (:class:`~vlattn.models.decoder.TransformerDecoder`);
- ``init``: ``paper`` | ``official``: after every module's own initialisation, Xavier-uniform on every saved tensor
  with more than one dimension (:func:`~vlattn.models.init.xavier_saved_tensors`), as ``Transformer.init_weights``;
  M2's memory slots are drawn by the memory attention's own ``init: official`` (the released (1, m, d) layout),
  which this option therefore requires. A group-wise layer's shared (out/k, in/k) weight is the released
  per-group ``nn.Linear``'s and is drawn alike (the released code has no per-group weights: with
  ``share_weights: false`` their (k, out/k, in/k) tensor gets the fans PyTorch computes for a 3-d tensor).

The decoder input of that code base is ``word_emb(w) + pos_emb(p)`` with no dropout and no scale; a kind whose
paper puts dropout there (``transformer``) reproduces it with ``model.embedding_dropout: 0``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from torch import nn

from vlattn.attention import MemoryAugmentedAttention
from vlattn.config import MAX_LENGTH, ModelConfig, bounded, parse_options
from vlattn.errors import ConfigError
from vlattn.layers import PositionTable, SinusoidalPositions
from vlattn.models.init import xavier_saved_tensors

# positions -> decoder position module (d_model, max_positions)
POSITIONS: dict[str, Callable[[int, int], nn.Module]] = {"sinusoidal": SinusoidalPositions, "table": PositionTable}


@dataclass
class ReleasedCodeOptions:
    """``model.options`` shared by kinds ``m2`` and ``transformer`` (see the module docstring)."""

    positions: Literal["sinusoidal", "table"] = "sinusoidal"
    padding: Literal["regions", "official"] = "regions"
    padded_regions: int = bounded(50, ge=1, le=MAX_LENGTH)
    init: Literal["paper", "official"] = "paper"

    def check_memory_init(self, cfg: ModelConfig) -> None:
        """Refuse ``init: official`` with memory slots that would not be drawn as the released code draws them."""
        encoder = cfg.encoder_self_attention
        if self.init != "official" or encoder.name != "memory":
            return
        memory = parse_options(MemoryAugmentedAttention.Options, encoder.options, "model.encoder_self_attention.options")
        if memory.init != "official":
            raise ConfigError(
                "model.options.init: official draws the memory slots as the released code does; set "
                "model.encoder_self_attention.options.init: official too"
            )

    def position_module(self, d_model: int, max_positions: int) -> nn.Module:
        """The decoder's positions: (length, start) -> (length, d_model)."""
        return POSITIONS[self.positions](d_model, max_positions)

    @property
    def released_padding(self) -> int | None:
        """The rows every image is zero-padded to under the released padding rule, None for the region mask."""
        return self.padded_regions if self.padding == "official" else None

    def initialise(self, model: nn.Module) -> None:
        """The released model-wide initialisation pass (``init: official``) over the built ``model``; nothing for
        ``init: paper``. Memory slots keep their own draw (their layout differs from the released one)."""
        if self.init != "official":
            return
        memories = [m for m in model.modules() if isinstance(m, MemoryAugmentedAttention)]
        xavier_saved_tensors(model, skip=[p for m in memories for p in (m.memory_keys, m.memory_values)])
