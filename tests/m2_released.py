"""An independent re-implementation of the released M2 code's forward pass and beam search
(aimagelab/meshed-memory-transformer: ``models/transformer/{attention,encoders,decoders,utils,transformer}.py``,
``models/beam_search/beam_search.py``, ``models/containers.py``), written from reading that code, as plain
functions over a state dict in the released layout. It is the yardstick of ``test_m2_official.py``: vlattn's
``official`` M2 options must reproduce it. Deliberately nothing here is shared with vlattn's modules.

What the released code does, step by step (eval mode: dropout is the identity):

- encoder: ``x = LayerNorm(ReLU(fc(features)))``; padding mask = ``x.sum(-1) == 0`` (True = masked);
  per layer ``x = FFN_block(MHA_block(x, x, x))`` and every layer's output is kept (B, L, N, d);
- ``MHA_block(q, k, v) = LayerNorm(q + attention(q, k, v))``; the attention projects q/k/v, appends the
  memory slots ``sqrt(d_k) * m_k`` / ``sqrt(m) * m_v`` (unprojected) to keys/values, scales logits by
  1/sqrt(d_k), fills masked input keys with -inf (never the slots), softmax, output projection;
- ``FFN_block(x) = LayerNorm(x + fc2(ReLU(fc1(x))))``;
- decoder: ``x = word_emb[w] + pos_emb[p]`` with p = 1..T (0 where w is padding; no dropout, no scale);
  per layer: ``s = MHA_block(x, x, x; causal + key padding) * q``, ``e_i = MHA_block(s, X_i, X_i) * q`` for
  levels i = 0..G-1 with one shared block, ``a_i = sigmoid(fc_alpha_i([s; e_i]))``,
  ``z = sum_i a_i e_i / sqrt(G) * q``, ``x = FFN_block(z) * q`` (q = 1 for non-padding queries, else 0);
  logits ``= fc(x)`` without bias, then log-softmax;
- stateful decoding feeds one token per step: each self-attention appends its inputs to its running keys,
  the running key mask grows by (token == pad), the position is the step count (pad or not);
- beam search: ``max_len`` steps always; a beam whose last word was EOS is frozen (its word log-probs are
  multiplied by 0 and its only candidate is word 0 at its old score, the rest -999); candidates ranked by
  cumulative log-probability with a descending sort over (beam, word); beam = index // V; finally beams are
  sorted by score and the per-step log-probs of the chosen words are returned with the words.

Exact ties between candidates are broken by ``torch.sort`` without ``stable=True`` in the released code, i.e.
by an unspecified order (CPU and CUDA differ). They arise when a beam has chosen the pad token: the released
model then outputs a uniform distribution for that beam (its state is zeroed), so all its continuations score
the same. :func:`released_beam_search` counts the steps whose selection depended on such a tie.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

State = dict[str, Tensor]


# --- a random state dict in the released layout ---------------------------------------------------------------


def random_released_state(
    *, vocab: int, d_model: int = 32, d_ff: int = 64, d_in: int = 12, slots: int = 6, layers: int = 3,
    max_len: int = 54, seed: int = 0,
) -> State:
    """Tensors named and shaped as the released ``Transformer(MemoryAugmentedEncoder, MeshedDecoder)``'s
    ``state_dict()`` (``layers`` encoder and decoder layers, ``layers`` gates), with random values: Xavier-like
    matrices and *non-zero* biases and LayerNorm parameters (so any mix-up of tensors shows), plus the empty
    runtime-state buffers of its stateful decoding."""
    g = torch.Generator().manual_seed(seed)

    def matrix(*shape: int) -> Tensor:
        fan = shape[-1] + shape[-2]
        return (torch.rand(*shape, generator=g) * 2 - 1) * math.sqrt(6 / fan)

    def vector(n: int, centre: float = 0.0) -> Tensor:
        return centre + 0.1 * torch.randn(n, generator=g)

    state: State = {}

    def linear(name: str, rows: int, cols: int, bias: bool = True) -> None:
        state[f"{name}.weight"] = matrix(rows, cols)
        if bias:
            state[f"{name}.bias"] = vector(rows)

    def norm(name: str) -> None:
        state[f"{name}.weight"], state[f"{name}.bias"] = vector(d_model, 1.0), vector(d_model)

    def attention(name: str, memory: bool = False) -> None:
        for proj in ("fc_q", "fc_k", "fc_v", "fc_o"):
            linear(f"{name}.attention.{proj}", d_model, d_model)
        if memory:
            state[f"{name}.attention.m_k"] = matrix(1, slots, d_model)
            state[f"{name}.attention.m_v"] = matrix(1, slots, d_model)
        norm(f"{name}.layer_norm")

    def feed_forward(name: str) -> None:
        linear(f"{name}.fc1", d_ff, d_model)
        linear(f"{name}.fc2", d_model, d_ff)
        norm(f"{name}.layer_norm")

    for i in range(layers):
        attention(f"encoder.layers.{i}.mhatt", memory=slots > 0)
        feed_forward(f"encoder.layers.{i}.pwff")
    linear("encoder.fc", d_model, d_in)
    norm("encoder.layer_norm")
    state["decoder.word_emb.weight"] = matrix(vocab, d_model)
    state["decoder.pos_emb.weight"] = matrix(max_len + 1, d_model)
    for i in range(layers):
        attention(f"decoder.layers.{i}.self_att")
        state[f"decoder.layers.{i}.self_att.running_keys"] = torch.zeros(0, d_model)
        state[f"decoder.layers.{i}.self_att.running_values"] = torch.zeros(0, d_model)
        attention(f"decoder.layers.{i}.enc_att")
        feed_forward(f"decoder.layers.{i}.pwff")
        for gate in range(1, layers + 1):
            linear(f"decoder.layers.{i}.fc_alpha{gate}", d_model, 2 * d_model)
    linear("decoder.fc", vocab, d_model, bias=False)
    state["decoder.running_mask_self_attention"] = torch.zeros(1, 1, 0, dtype=torch.uint8)
    state["decoder.running_seq"] = torch.zeros(1, dtype=torch.long)
    return state


# --- the forward pass -------------------------------------------------------------------------------------------


def _linear(sd: State, name: str, x: Tensor) -> Tensor:
    return F.linear(x, sd[f"{name}.weight"], sd.get(f"{name}.bias"))


def _norm(sd: State, name: str, x: Tensor) -> Tensor:
    return F.layer_norm(x, x.shape[-1:], sd[f"{name}.weight"], sd[f"{name}.bias"])


def _attention(sd: State, name: str, q_in: Tensor, k_in: Tensor, v_in: Tensor, masked: Tensor | None, heads: int) -> Tensor:
    """The released scaled dot-product attention (with memory if the state has its slots); ``masked`` True =
    not attended, broadcastable to (B, h, nq, nk)."""
    b, nq, d = q_in.shape
    nk = k_in.shape[1]
    dk = d // heads
    q = _linear(sd, f"{name}.fc_q", q_in).view(b, nq, heads, dk).permute(0, 2, 1, 3)
    k = _linear(sd, f"{name}.fc_k", k_in)
    v = _linear(sd, f"{name}.fc_v", v_in)
    if f"{name}.m_k" in sd:
        m = sd[f"{name}.m_k"].shape[1]
        k = torch.cat([k, math.sqrt(dk) * sd[f"{name}.m_k"].expand(b, m, d)], 1)
        v = torch.cat([v, math.sqrt(m) * sd[f"{name}.m_v"].expand(b, m, d)], 1)
    total = k.shape[1]
    k = k.view(b, total, heads, dk).permute(0, 2, 3, 1)  # (b, h, dk, nk + m)
    v = v.view(b, total, heads, dk).permute(0, 2, 1, 3)
    att = torch.matmul(q, k) / math.sqrt(dk)
    if masked is not None:
        att = torch.cat([att[..., :nk].masked_fill(masked, float("-inf")), att[..., nk:]], -1)
    out = torch.matmul(torch.softmax(att, -1), v).permute(0, 2, 1, 3).reshape(b, nq, d)
    return _linear(sd, f"{name}.fc_o", out)


def _mha_block(sd: State, name: str, q: Tensor, k: Tensor, v: Tensor, masked: Tensor | None, heads: int) -> Tensor:
    return _norm(sd, f"{name}.layer_norm", q + _attention(sd, f"{name}.attention", q, k, v, masked, heads))


def _ffn_block(sd: State, name: str, x: Tensor) -> Tensor:
    hidden = _linear(sd, f"{name}.fc2", torch.relu(_linear(sd, f"{name}.fc1", x)))
    return _norm(sd, f"{name}.layer_norm", x + hidden)


def _count(sd: State, prefix: str) -> int:
    return len({key.split(".")[2] for key in sd if key.startswith(prefix)})


def released_encode(sd: State, features: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    """Encoder outputs (B, L, N, d) and the padding mask (B, 1, 1, N), True = masked."""
    x = _norm(sd, "encoder.layer_norm", torch.relu(_linear(sd, "encoder.fc", features)))
    masked = (x.sum(-1) == 0)[:, None, None, :]
    outs = []
    for i in range(_count(sd, "encoder.layers.")):
        x = _mha_block(sd, f"encoder.layers.{i}.mhatt", x, x, x, masked, heads)
        x = _ffn_block(sd, f"encoder.layers.{i}.pwff", x)
        outs.append(x)
    return torch.stack(outs, 1), masked


def _decoder_layer(sd: State, i: int, x: Tensor, keys: Tensor, enc: Tensor, enc_masked: Tensor,
                   self_masked: Tensor, query: Tensor, heads: int) -> Tensor:
    """One ``MeshedDecoderLayer``; ``keys`` are the self-attention keys/values (all positions so far)."""
    name = f"decoder.layers.{i}"
    s = _mha_block(sd, f"{name}.self_att", x, keys, keys, self_masked, heads) * query
    gates = sum(1 for key in sd if key.startswith(f"{name}.fc_alpha") and key.endswith(".weight"))
    total = 0
    for level in range(gates):
        e = _mha_block(sd, f"{name}.enc_att", s, enc[:, level], enc[:, level], enc_masked, heads) * query
        alpha = torch.sigmoid(_linear(sd, f"{name}.fc_alpha{level + 1}", torch.cat([s, e], -1)))
        total = total + alpha * e
    z = total / math.sqrt(gates) * query
    return _ffn_block(sd, f"{name}.pwff", z) * query


def decoder_inputs(sd: State, tokens: Tensor, pad: int) -> tuple[Tensor, Tensor, Tensor]:
    """The code base's teacher-forced decoder input for ``tokens`` (B, T) (the released LW-Transformer code reuses
    it): ``word_emb[w] + pos_emb[p]`` (B, T, d), the self-attention mask (B, 1, T, T) True = masked (causal + pad
    keys), and the query mask (B, T, 1), 0 at pad tokens."""
    b, t = tokens.shape
    query = (tokens != pad).unsqueeze(-1).float()
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)[None, None]
    self_masked = causal | (tokens == pad)[:, None, None, :]
    positions = torch.arange(1, t + 1).expand(b, t).masked_fill(tokens == pad, 0)
    x = sd["decoder.word_emb.weight"][tokens] + sd["decoder.pos_emb.weight"][positions]
    return x, self_masked, query


def released_log_probs(sd: State, features: Tensor, tokens: Tensor, *, pad: int, heads: int) -> Tensor:
    """Teacher-forced log-probabilities (B, T, V) of the released model for input ``tokens`` (B, T)."""
    enc, enc_masked = released_encode(sd, features, heads)
    x, self_masked, query = decoder_inputs(sd, tokens, pad)
    for i in range(_count(sd, "decoder.layers.")):
        x = _decoder_layer(sd, i, x, x, enc, enc_masked, self_masked, query, heads)
    return torch.log_softmax(F.linear(x, sd["decoder.fc.weight"]), -1)


# --- stateful decoding and the beam search -----------------------------------------------------------------------


class ReleasedStateful:
    """The released model in its stateful mode: one token per call, running keys/masks/positions (the step count).
    ``encode``/``layer`` are the model's own (subclasses: the code bases built on M2's, such as LW-Transformer's)."""

    def __init__(self, sd: State, features: Tensor, *, pad: int, heads: int) -> None:
        self.sd, self.pad, self.heads = sd, pad, heads
        self.enc, self.enc_masked = self.encode(features)
        b = features.shape[0]
        d = sd["decoder.word_emb.weight"].shape[1]
        self.keys = [torch.zeros(b, 0, d) for _ in range(_count(sd, "decoder.layers."))]
        self.running_mask = torch.zeros(b, 1, 1, 0, dtype=torch.bool)
        self.running_seq = torch.zeros(b, 1, dtype=torch.long)

    def encode(self, features: Tensor) -> tuple[Tensor, Tensor]:
        """The encoder's output and its padding mask (True = masked)."""
        return released_encode(self.sd, features, self.heads)

    def layer(self, i: int, x: Tensor, query: Tensor) -> Tensor:
        """Decoder layer ``i`` on this step's ``x`` (b, 1, d), its self-attention keys so far in ``self.keys[i]``."""
        return _decoder_layer(self.sd, i, x, self.keys[i], self.enc, self.enc_masked, self.running_mask, query,
                              self.heads)

    def step(self, word: Tensor) -> Tensor:
        """``word`` (b, 1) -> log-probabilities (b, 1, V)."""
        query = (word != self.pad).unsqueeze(-1).float()
        self.running_mask = torch.cat([self.running_mask, (word == self.pad)[:, None, None, :]], -1)
        self.running_seq = self.running_seq + 1
        x = self.sd["decoder.word_emb.weight"][word] + self.sd["decoder.pos_emb.weight"][self.running_seq]
        for i, keys in enumerate(self.keys):
            self.keys[i] = torch.cat([keys, x], 1)
            x = self.layer(i, x, query)
        return torch.log_softmax(F.linear(x, self.sd["decoder.fc.weight"]), -1)

    def select(self, rows: Tensor) -> None:
        """Keep/expand batch rows ``rows`` of every state."""
        self.enc, self.enc_masked = self.enc[rows], self.enc_masked[rows]
        self.keys = [k[rows] for k in self.keys]
        self.running_mask, self.running_seq = self.running_mask[rows], self.running_seq[rows]


class ReleasedBeams(NamedTuple):
    """``words`` and ``log_probs`` (B, out_size, max_len), best beam first; ``ties``: the number of (image,
    step) selections among the top beam_size + 1 candidates that involved exactly equal scores."""

    words: Tensor
    log_probs: Tensor
    ties: int


def released_beam_search(
    sd: State, features: Tensor, *, bos: int, eos: int, pad: int, heads: int, beam_size: int = 5,
    max_len: int = 20, out_size: int = 1,
) -> ReleasedBeams:
    """The released ``BeamSearch.apply`` (see the module docstring) over the released M2 model."""
    return beam_search_over(ReleasedStateful(sd, features, pad=pad, heads=heads), features.shape[0], bos=bos, eos=eos,
                            beam_size=beam_size, max_len=max_len, out_size=out_size)


def beam_search_over(
    model: ReleasedStateful, b: int, *, bos: int, eos: int, beam_size: int = 5, max_len: int = 20, out_size: int = 1,
) -> ReleasedBeams:
    """The released ``BeamSearch.apply`` over ``b`` images of ``model`` (the code bases built on M2's, such as
    LW-Transformer's, share this search)."""
    seq_mask = torch.ones(b, beam_size, 1)
    seq_logprob = torch.zeros(b, 1, 1)
    outputs: list[Tensor] = []
    log_probs: list[Tensor] = []
    words = torch.full((b, 1), bos, dtype=torch.long)
    ties = 0
    for t in range(max_len):
        current = 1 if t == 0 else beam_size
        word_logprob = model.step(words).view(b, current, -1)
        vocab = word_logprob.shape[-1]
        candidates = seq_logprob + word_logprob
        if t > 0:
            seq_mask = seq_mask * (words.view(b, current) != eos).float().unsqueeze(-1)
            word_logprob = word_logprob * seq_mask.expand_as(word_logprob)
            frozen = seq_logprob.expand_as(candidates).clone()
            frozen[:, :, 1:] = -999
            candidates = seq_mask * candidates + frozen * (1 - seq_mask)
        ranked, index = torch.sort(candidates.view(b, -1), -1, descending=True)
        for row in ranked[:, : beam_size + 1]:
            real = row[row != -999]
            ties += int(real.unique().numel() < real.numel())
        ranked, index = ranked[:, :beam_size], index[:, :beam_size]
        beam = torch.div(index, vocab, rounding_mode="floor")
        chosen = index - beam * vocab
        model.select((torch.arange(b)[:, None] * current + beam).reshape(-1))
        seq_logprob = ranked.unsqueeze(-1)
        seq_mask = torch.gather(seq_mask, 1, beam.unsqueeze(-1))
        outputs = [torch.gather(o, 1, beam.unsqueeze(-1)) for o in outputs] + [chosen.unsqueeze(-1)]
        this = torch.gather(word_logprob, 1, beam.unsqueeze(-1).expand(b, beam_size, vocab))
        this = torch.gather(this, 2, chosen.unsqueeze(-1))
        log_probs = [torch.gather(o, 1, beam.unsqueeze(-1)) for o in log_probs] + [this]
        words = chosen.reshape(-1, 1)
    order = torch.sort(seq_logprob, 1, descending=True)[1]  # (b, K, 1)
    words_out = torch.gather(torch.cat(outputs, -1), 1, order.expand(b, beam_size, max_len))
    probs_out = torch.gather(torch.cat(log_probs, -1), 1, order.expand(b, beam_size, max_len))
    return ReleasedBeams(words_out[:, :out_size], probs_out[:, :out_size], ties)
