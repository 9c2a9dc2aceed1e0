"""The Transformer captioner: SAN of NG-SAN Sec. 3.2 (Fig. 1) / the Transformer baseline of the M2 paper
(Sec. 4.3), with the attention mechanism of each site chosen through the registry.

Generation interface (decoding code never looks inside): ``encode`` -> state dict, ``step`` -> next-token
log-probabilities, ``reorder`` -> state rows for beams. With ``use_cache`` the state carries key/value
caches (self-attention appended step by step, cross-attention projected once per image); without it,
``step`` re-runs the decoder over the whole prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from torch import Tensor, nn

from vlattn.attention import build_attention, reorder_state
from vlattn.config import AttentionSpec, ModelConfig
from vlattn.errors import ConfigError
from vlattn.layers.boxes import BOX_CHANNELS, with_box_channels
from vlattn.models.decoder import CrossAttentionSite, TransformerDecoder
from vlattn.models.encoder import TransformerEncoder

State = dict[str, Any]


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

    def _encode(self, features: Tensor, boxes: Tensor, region_mask: Tensor) -> Tensor:
        """Encoder outputs (B, L, N, d); with ``box_input`` the normalised boxes join the features."""
        if self.box_input:
            features = with_box_channels(features, boxes)  # (B, N, D + 5)
        return self.encoder(features, region_mask)

    def forward(self, features: Tensor, boxes: Tensor, region_mask: Tensor, tokens: Tensor) -> Tensor:
        """Teacher forcing: ``features`` (B, N, D), ``boxes`` (B, N, 4) normalised x1y1x2y2 (used with
        ``box_input``), ``region_mask`` bool (B, N), input ``tokens`` (B, T) -> logits (B, T, V)."""
        return self.decoder(tokens, self._encode(features, boxes, region_mask), region_mask)

    def encode(self, features: Tensor, boxes: Tensor, region_mask: Tensor, use_cache: bool | None = None) -> State:
        """State for decoding: ``memory`` (B, L, N, d), ``memory_mask`` (B, N) and, when caching (default
        ``self.use_cache``), ``cache`` (per decoder layer). ``step`` updates the caches in place."""
        state: State = {"memory": self._encode(features, boxes, region_mask), "memory_mask": region_mask}
        if self.use_cache if use_cache is None else use_cache:
            state["cache"] = self.decoder.new_cache()
        return state

    def step(self, tokens: Tensor, state: State) -> tuple[Tensor, State]:
        """Log-probabilities (B, V) of the next token after ``tokens`` (B, t) (BOS first), and the state."""
        memory, memory_mask = state["memory"], state["memory_mask"]
        if "cache" in state:
            hidden = self.decoder.hidden(tokens[:, -1:], memory, memory_mask, state["cache"], tokens.shape[1] - 1)
        else:
            hidden = self.decoder.hidden(tokens, memory, memory_mask)
        return self.decoder.output(hidden[:, -1]).log_softmax(dim=-1), state

    def reorder(self, state: State, index: Tensor) -> State:
        """Select/expand batch rows ``index`` (B',) of every tensor and cache in ``state``."""
        return reorder_state(state, index)


def attention_factory(spec: AttentionSpec, d_model: int, num_heads: int, dropout: float) -> Callable[[], nn.Module]:
    """A zero-argument builder of the registered mechanism ``spec.name`` with ``spec.options``."""
    return partial(build_attention, spec.name, d_model=d_model, num_heads=num_heads, dropout=dropout, **spec.options)


def build_transformer(cfg: ModelConfig, vocab_size: int, pad_id: int = 0) -> TransformerCaptioner:
    """The Transformer captioner described by ``cfg`` (``cfg.options`` must be empty for this kind)."""
    if cfg.options:
        raise ConfigError(f"model.options: kind 'transformer' takes no options, got {sorted(cfg.options)}")
    make_cross = attention_factory(cfg.decoder_cross_attention, cfg.d_model, cfg.num_heads, cfg.dropout)
    return encoder_decoder(
        cfg, vocab_size, pad_id, lambda _: CrossAttentionSite(make_cross(), cfg.d_model, cfg.dropout)
    )


def encoder_decoder(
    cfg: ModelConfig, vocab_size: int, pad_id: int, make_cross_site: Callable[[int], nn.Module]
) -> TransformerCaptioner:
    """Encoder and decoder stacks of ``cfg`` with the cross-attention site of decoder layer i from
    ``make_cross_site(i)`` (the extension point of model kinds that differ only there, e.g. M2)."""
    make = partial(attention_factory, d_model=cfg.d_model, num_heads=cfg.num_heads, dropout=cfg.dropout)
    input_dim = cfg.feature_dim + (BOX_CHANNELS if cfg.box_input else 0)
    encoder = TransformerEncoder(
        input_dim, cfg.d_model, cfg.d_ff, cfg.encoder_layers, cfg.dropout, make(cfg.encoder_self_attention)
    )
    decoder = TransformerDecoder(
        vocab_size,
        cfg.d_model,
        cfg.d_ff,
        cfg.decoder_layers,
        cfg.dropout,
        cfg.max_positions,
        make(cfg.decoder_self_attention),
        make_cross_site,
        pad_id=pad_id,
        tie_embeddings=cfg.tie_embeddings,
        output_bias=cfg.output_bias,
    )
    return TransformerCaptioner(encoder, decoder, box_input=cfg.box_input)
