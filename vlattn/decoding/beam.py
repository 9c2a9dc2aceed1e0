"""Batched beam search over any model with ``encode``/``step``/``reorder`` (as used by the M2 paper, Sec. 4.2,
beam 5; NG-SAN Sec. 5.1, beam 3), with optional length normalisation score / length^alpha.

All images and beams advance together as one (B * K)-row batch: the K * V candidates of each image are
ranked with one ``topk``, beam and word indices come from integer floor division, and finished beams are
kept alive by allowing them a single zero-cost continuation (written as ``pad``) — no per-image loops.
With ``grad=True`` the per-token log-probabilities of the returned beams keep their gradients (SCST over
the k beams, M2 Sec. 3.3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import torch
from torch import Tensor

from vlattn.decoding.common import Generator, extend, first_step


class Beams(NamedTuple):
    """``tokens`` (B, K, L) best first, without BOS, EOS included, ``pad`` after it (``L <= max_len``);
    ``log_probs`` (B, K, L) per token (0 after EOS); ``scores`` (B, K) sum of log-probs / length^alpha."""

    tokens: Tensor
    log_probs: Tensor
    scores: Tensor


def beam_search(
    model: Generator,
    inputs: Mapping[str, Any],
    *,
    bos: int,
    eos: int,
    beam_size: int = 5,
    max_len: int = 20,
    length_penalty: float = 0.0,
    pad: int = 0,
    grad: bool = False,
) -> Beams:
    """Keep the ``beam_size`` best prefixes per image of ``inputs`` (the model's input mapping) for up to
    ``max_len`` words; see :class:`Beams`.

    ``length_penalty`` alpha ranks hypotheses by sum(log p) / length^alpha (0 = plain sum, 1 = mean).
    ``grad``: keep the graph so ``log_probs`` are differentiable.
    """
    with torch.set_grad_enabled(grad):
        first, state, prefix, _ = first_step(model, inputs, bos, beam_size)
        batch = first.shape[0]
        top, word = first.topk(beam_size, dim=-1)  # (B, K): K distinct first words per image
        finished = torch.zeros(prefix.shape[0], dtype=torch.bool, device=prefix.device)  # (R,), R = B * K
        prefix, _, finished = extend(prefix, word.reshape(-1), finished, pad, eos)
        token_log_probs = top.reshape(-1, 1)  # (R, t)
        total = top.reshape(-1)  # (R,) sum of log-probs
        length = torch.ones_like(total)  # (R,) words up to and including EOS
        offsets = torch.arange(batch, device=prefix.device)[:, None] * beam_size  # (B, 1)
        vocab = first.shape[1]
        frozen = torch.full_like(first[0], float("-inf"))  # (V,): a finished row's only continuation
        frozen[eos] = 0.0
        rank = None  # (R, V) buffer of the candidates' ranking scores, reused from step to step
        for _ in range(1, max_len):
            if finished.all():
                break
            log_probs, state = model.step(prefix, state)  # (R, V)
            log_probs = freeze_finished(log_probs, finished, frozen)  # (R, V)
            grown = length + (~finished).to(length.dtype)  # (R,)
            rank = candidate_scores(log_probs, total, grown, length_penalty, rank)  # (R, V)
            _, flat = rank.reshape(batch, beam_size * vocab).topk(beam_size, dim=-1)  # (B, K)
            source = (offsets + torch.div(flat, vocab, rounding_mode="floor")).reshape(-1)  # (R,) row of origin
            word = (flat % vocab).reshape(-1)  # (R,)
            state = model.reorder(state, source)
            chosen = log_probs[source, word]  # (R,), 0 for finished rows
            total, length = total[source] + chosen, grown[source]
            token_log_probs = torch.cat([token_log_probs[source], chosen[:, None]], dim=1)
            prefix, _, finished = extend(prefix[source], word, finished[source], pad, eos)
        scores = (total / length**length_penalty).reshape(batch, beam_size)
        tokens = prefix[:, 1:].reshape(batch, beam_size, -1)
        return Beams(tokens, token_log_probs.reshape(batch, beam_size, -1), scores)


def freeze_finished(log_probs: Tensor, finished: Tensor, frozen: Tensor) -> Tensor:
    """``log_probs`` (R, V) with the rows of ``finished`` (R,) beams replaced by ``frozen`` (V,) (their only
    continuation). Without gradients the rows are overwritten in place (only the finished rows are touched);
    with gradients a new tensor (autograd needs log-softmax's output as it was)."""
    if log_probs.requires_grad:
        return torch.where(finished[:, None], frozen, log_probs)
    rows = finished.nonzero().squeeze(1)  # (F,)
    if rows.numel():
        log_probs.index_copy_(0, rows, frozen.expand(rows.shape[0], -1))
    return log_probs


def candidate_scores(
    log_probs: Tensor, total: Tensor, grown: Tensor, length_penalty: float, out: Tensor | None
) -> Tensor:
    """(total + log_probs) / grown^alpha, (R, V), without gradients (it only ranks); into ``out`` when it has the
    shape (a buffer reused across steps: no fresh pages to fault in every step). alpha = 0 divides by nothing."""
    out = out if out is not None and out.shape == log_probs.shape else None
    ranked = torch.add(log_probs.detach(), total.detach()[:, None], out=out)  # (R, V)
    return ranked if length_penalty == 0 else ranked.div_(grown[:, None] ** length_penalty)
