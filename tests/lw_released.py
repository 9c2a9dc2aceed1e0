"""An independent re-implementation of the released LW-Transformer captioning code's forward pass
(luogen1996/LWTransformer, ``ImageCaptioning/models/transformer_lightweight/{attention,encoders,decoders,utils,
transformer}.py``, and its dense twin ``transformer_official``, which ``train.py --model transformer`` builds), written
from reading that code, as plain functions over a state dict in the released layout. It is the yardstick of
``test_lw_official.py``: kind ``transformer`` with the official options must reproduce it. Deliberately nothing
here is shared with vlattn's modules; the decoder input is the M2 code base's (``m2_released.decoder_inputs``).

What the released code does (eval mode: dropout is the identity), with k groups (1 for the dense model), h heads,
query/key head width d_k (``--d_k``) and value head width d / h:

- ``LScaledDotProductAttention``: every projection is one ``nn.Linear`` applied to each of the k contiguous
  channel groups (``x.view(b, n, k, -1)``, weights shared by the groups), fc_q/fc_k d/k -> h d_k / k, fc_v
  d/k -> d/k; the outputs reshaped to h heads in group order; logits / sqrt(d_k), masked keys -inf, softmax, heads
  concatenated, then fc_o d/k -> d/k per group (the merge is group-wise too);
- ``LMultiHeadAttention(q, k, v) = LayerNorm_a(q + attention(q, k, v))``; the encoder and decoder layers wrap it
  again: ``LayerNorm_b(q + LMultiHeadAttention(q, k, v))``;
- ``LPositionWiseFeedForward(x) = LayerNorm(x + fc2(ReLU(fc1(x)).view(b, n, k, -1)).view(b, n, d))``: fc1 dense
  d -> d_ff, fc2 d_ff/k -> d/k shared by the groups (``PositionWiseFeedForward``: fc2 dense);
- encoder: ``x = LayerNorm(ReLU(fc(features)))``; mask = ``x.sum(-1) == 0`` (True = masked); the layers; only the
  last layer's output is returned;
- decoder: ``x = word_emb[w] + pos_emb[p]``, p = 1..T (0 where w is padding); per layer ``s = Self(x) * q``,
  ``e = Cross(s, enc) * q``, ``x = FFN(e) * q`` (q = 0 at pad tokens); logits = fc(x) without bias, log-softmax;
- stateful decoding: one token per call, each self-attention appends its input to running keys/values, the key
  mask grows by (token == pad), the position is the step count.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import m2_released
from m2_released import decoder_inputs
from torch import Tensor

State = dict[str, Tensor]


def released_shapes(
    *, vocab: int, d_model: int, heads: int, d_k: int, d_ff: int, d_in: int, groups: int, layers: tuple[int, int],
    max_len: int, lffn: bool = True,
) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor of the released ``Transformer(LTransformerEncoder, LTransformerDecoderLayer)``
    ``state_dict()`` (``groups`` 1 and ``lffn`` False: the dense ``transformer_official`` model), runtime-state
    buffers aside; ``decoder.pos_emb.weight`` is frozen, everything else trainable."""
    shapes: dict[str, tuple[int, ...]] = {}
    d_v = d_model // heads

    def linear(name: str, rows: int, cols: int, bias: bool = True) -> None:
        shapes[f"{name}.weight"] = (rows, cols)
        if bias:
            shapes[f"{name}.bias"] = (rows,)

    def norm(name: str) -> None:
        shapes[f"{name}.weight"] = shapes[f"{name}.bias"] = (d_model,)

    def attention(name: str) -> None:  # LMultiHeadAttention
        for proj, width in (("fc_q", d_k), ("fc_k", d_k), ("fc_v", d_v)):
            linear(f"{name}.attention.{proj}", heads * width // groups, d_model // groups)
        linear(f"{name}.attention.fc_o", d_model // groups, heads * d_v // groups)
        norm(f"{name}.layer_norm")

    def feed_forward(name: str) -> None:
        linear(f"{name}.fc1", d_ff, d_model)
        linear(f"{name}.fc2", *((d_model // groups, d_ff // groups) if lffn else (d_model, d_ff)))
        norm(f"{name}.layer_norm")

    for i in range(layers[0]):
        attention(f"encoder.layers.{i}.mhatt")
        norm(f"encoder.layers.{i}.lnorm")
        feed_forward(f"encoder.layers.{i}.pwff")
    linear("encoder.fc", d_model, d_in)
    norm("encoder.layer_norm")
    shapes["decoder.word_emb.weight"] = (vocab, d_model)
    shapes["decoder.pos_emb.weight"] = (max_len + 1, d_model)
    for i in range(layers[1]):
        attention(f"decoder.layers.{i}.self_att")
        attention(f"decoder.layers.{i}.enc_att")
        norm(f"decoder.layers.{i}.lnorm1")
        norm(f"decoder.layers.{i}.lnorm2")
        feed_forward(f"decoder.layers.{i}.pwff")
    linear("decoder.fc", vocab, d_model, bias=False)
    return shapes


def random_state(shapes: dict[str, tuple[int, ...]], seed: int) -> State:
    """Random tensors of ``shapes``: Xavier-like matrices, and *non-zero* biases and LayerNorm parameters (weights
    around 1), so that any mix-up of tensors shows."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in shapes.items():
        if len(shape) == 2:
            state[name] = (torch.rand(shape, generator=g) * 2 - 1) * math.sqrt(6 / sum(shape))
        else:
            centre = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            state[name] = centre + 0.1 * torch.randn(shape, generator=g)
    return state


def _linear(sd: State, name: str, x: Tensor) -> Tensor:
    return F.linear(x, sd[f"{name}.weight"], sd.get(f"{name}.bias"))


def _norm(sd: State, name: str, x: Tensor) -> Tensor:
    return F.layer_norm(x, x.shape[-1:], sd[f"{name}.weight"], sd[f"{name}.bias"])


def _grouped(sd: State, name: str, x: Tensor, groups: int) -> Tensor:
    """One Linear applied to each of the ``groups`` contiguous channel groups of ``x`` (b, n, c), concatenated."""
    b, n, _ = x.shape
    return _linear(sd, name, x.view(b, n, groups, -1)).view(b, n, -1)


def _attention(sd: State, name: str, q_in: Tensor, kv_in: Tensor, masked: Tensor | None, heads: int,
               groups: int) -> Tensor:
    """``LMultiHeadAttention``: LayerNorm(q + LScaledDotProductAttention(q, kv, kv)); ``masked`` True = not
    attended, broadcastable to (b, h, nq, nk)."""
    b, nq, d = q_in.shape
    nk = kv_in.shape[1]
    q = _grouped(sd, f"{name}.attention.fc_q", q_in, groups).view(b, nq, heads, -1).permute(0, 2, 1, 3)
    k = _grouped(sd, f"{name}.attention.fc_k", kv_in, groups).view(b, nk, heads, -1).permute(0, 2, 3, 1)
    v = _grouped(sd, f"{name}.attention.fc_v", kv_in, groups).view(b, nk, heads, -1).permute(0, 2, 1, 3)
    att = torch.matmul(q, k) / math.sqrt(q.shape[-1])  # (b, h, nq, nk)
    if masked is not None:
        att = att.masked_fill(masked, float("-inf"))
    out = torch.matmul(torch.softmax(att, -1), v).permute(0, 2, 1, 3).reshape(b, nq, -1)
    return _norm(sd, f"{name}.layer_norm", q_in + _grouped(sd, f"{name}.attention.fc_o", out, groups))


def _feed_forward(sd: State, name: str, x: Tensor, groups: int) -> Tensor:
    """``LPositionWiseFeedForward`` (fc2 per group) or, when fc2 reads all hidden units, ``PositionWiseFeedForward``."""
    hidden = torch.relu(_linear(sd, f"{name}.fc1", x))
    fc2_groups = hidden.shape[-1] // sd[f"{name}.fc2.weight"].shape[1]
    return _norm(sd, f"{name}.layer_norm", x + _grouped(sd, f"{name}.fc2", hidden, fc2_groups))


def _count(sd: State, prefix: str) -> int:
    return len({key.split(".")[2] for key in sd if key.startswith(prefix)})


def released_encode(sd: State, features: Tensor, heads: int, groups: int) -> tuple[Tensor, Tensor]:
    """The last encoder layer's output (B, N, d) and the padding mask (B, 1, 1, N), True = masked."""
    x = _norm(sd, "encoder.layer_norm", torch.relu(_linear(sd, "encoder.fc", features)))
    masked = (x.sum(-1) == 0)[:, None, None, :]
    for i in range(_count(sd, "encoder.layers.")):
        name = f"encoder.layers.{i}"
        x = _norm(sd, f"{name}.lnorm", x + _attention(sd, f"{name}.mhatt", x, x, masked, heads, groups))
        x = _feed_forward(sd, f"{name}.pwff", x, groups)
    return x, masked


def _decoder_layer(sd: State, i: int, x: Tensor, keys: Tensor, enc: Tensor, enc_masked: Tensor,
                   self_masked: Tensor, query: Tensor, heads: int, groups: int) -> Tensor:
    """One ``DecoderLayer``; ``keys`` are the self-attention keys/values (all positions so far)."""
    name = f"decoder.layers.{i}"
    s = _norm(sd, f"{name}.lnorm1", x + _attention(sd, f"{name}.self_att", x, keys, self_masked, heads, groups))
    s = s * query
    e = _norm(sd, f"{name}.lnorm2", s + _attention(sd, f"{name}.enc_att", s, enc, enc_masked, heads, groups))
    return _feed_forward(sd, f"{name}.pwff", e * query, groups) * query


def released_log_probs(sd: State, features: Tensor, tokens: Tensor, *, pad: int, heads: int, groups: int) -> Tensor:
    """Teacher-forced log-probabilities (B, T, V) of the released model for input ``tokens`` (B, T)."""
    enc, enc_masked = released_encode(sd, features, heads, groups)
    x, self_masked, query = decoder_inputs(sd, tokens, pad)
    for i in range(_count(sd, "decoder.layers.")):
        x = _decoder_layer(sd, i, x, x, enc, enc_masked, self_masked, query, heads, groups)
    return torch.log_softmax(F.linear(x, sd["decoder.fc.weight"]), -1)


class ReleasedStateful(m2_released.ReleasedStateful):
    """The released model in its stateful mode, as the M2 code base's (the position is the step count), with this
    model's encoder and decoder layers."""

    def __init__(self, sd: State, features: Tensor, *, pad: int, heads: int, groups: int) -> None:
        self.groups = groups
        super().__init__(sd, features, pad=pad, heads=heads)

    def encode(self, features: Tensor) -> tuple[Tensor, Tensor]:
        return released_encode(self.sd, features, self.heads, self.groups)

    def layer(self, i: int, x: Tensor, query: Tensor) -> Tensor:
        return _decoder_layer(self.sd, i, x, self.keys[i], self.enc, self.enc_masked, self.running_mask, query,
                              self.heads, self.groups)


def released_steps(sd: State, features: Tensor, tokens: Tensor, *, pad: int, heads: int, groups: int) -> Tensor:
    """The stateful mode fed ``tokens`` (B, T) one per call: the log-probabilities (B, T, V) after each."""
    model = ReleasedStateful(sd, features, pad=pad, heads=heads, groups=groups)
    return torch.cat([model.step(tokens[:, step : step + 1]) for step in range(tokens.shape[1])], 1)
