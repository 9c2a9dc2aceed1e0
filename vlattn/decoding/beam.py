"""Batched beam search over any model with ``encode``/``step``/``reorder`` (as used by the M2 paper, Sec. 4.2,
beam 5; NG-SAN Sec. 5.1, beam 3), with optional length normalisation score / length^alpha.

All images and beams advance together as one (B * K)-row batch: each row's K best continuations (one
``topk`` over its V log-probs) are the only candidates an image's K best can come from, so the K * K of them
are ranked per image with one small ``topk`` (no (B * K, V) score matrix); finished beams are kept alive by
allowing them a single zero-cost continuation (written as ``pad``) — no per-image loops.
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
        frozen = frozen_candidates(top.detach()[0], eos)
        for _ in range(1, max_len):
            if finished.all():
                break
            log_probs, state = model.step(prefix, state)  # (R, V)
            grown = length + (~finished).to(length.dtype)  # (R,)
            source, word, chosen = select(log_probs, finished, total, grown, length_penalty, frozen)  # (R,) each
            del log_probs  # freed before the next step allocates its (R, V): the allocator can reuse the memory
            state = model.reorder(state, source)
            total, length = total[source] + chosen, grown[source]
            token_log_probs = torch.cat([token_log_probs[source], chosen[:, None]], dim=1)
            prefix, _, finished = extend(prefix[source], word, finished[source], pad, eos)
        scores = (total / length**length_penalty).reshape(batch, beam_size)
        tokens = prefix[:, 1:].reshape(batch, beam_size, -1)
        return Beams(tokens, token_log_probs.reshape(batch, beam_size, -1), scores)


def select(
    log_probs: Tensor, finished: Tensor, total: Tensor, grown: Tensor, length_penalty: float,
    frozen: tuple[Tensor, Tensor],
) -> tuple[Tensor, Tensor, Tensor]:
    """One step's K best continuations of each image, ranked by (total + log p) / grown^alpha among its K V
    candidates (rows grouped image by image, R = B K): ``source`` (R,), the row each continues (of the same
    image), its ``word`` (R,) and the word's log-prob ``chosen`` (R,) (0 for a finished row, differentiable
    when ``log_probs`` is), best first per image. ``log_probs`` (R, V); ``total`` and ``grown`` (R,): the rows'
    sums of log-probs and lengths after this step; ``frozen``: :func:`frozen_candidates`."""
    best, candidate = row_candidates(log_probs, finished, frozen)  # (R, K) each
    beam_size = best.shape[1]
    rank = candidate_scores(best, total, grown, length_penalty)  # (R, K)
    _, pick = rank.reshape(-1, beam_size * beam_size).topk(beam_size, dim=-1)  # (B, K) in [0, K K)
    first = torch.arange(pick.shape[0], device=pick.device)[:, None] * beam_size**2  # (B, 1)
    pick = (pick + first).reshape(-1)  # (R,) into the R K candidates
    source = torch.div(pick, beam_size, rounding_mode="floor")  # (R,)
    return source, candidate.reshape(-1)[pick], best.reshape(-1)[pick]


def frozen_candidates(like: Tensor, eos: int) -> tuple[Tensor, Tensor]:
    """A finished row's candidates, shaped as :func:`row_candidates`' rows (K,): EOS at no cost (written as
    ``pad``), then nothing (-inf)."""
    score = torch.full_like(like, float("-inf"))
    score[0] = 0.0
    return score, torch.full(like.shape, eos, dtype=torch.long, device=like.device)


def row_candidates(log_probs: Tensor, finished: Tensor, frozen: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """Each row's K best continuations: log-probs (R, K), best first, and their words (R, K), from ``log_probs``
    (R, V); rows of ``finished`` (R,) beams get ``frozen`` (their only continuation). Differentiable in
    ``log_probs`` when it is.

    Ranking an image's K V candidates needs only these K K: a candidate among the image's K best has fewer than
    K better candidates in all, so fewer than K in its own row, and ``(total + log p) / length^alpha`` grows with
    log p within a row (one total and length per row). Exact ties at the K-th place may resolve to another of
    the tied candidates than a top-K over all K V would (``topk`` orders ties unspecified either way)."""
    best, word = log_probs.topk(frozen[0].shape[0], dim=-1)  # (R, K)
    done = finished[:, None]  # (R, 1)
    return torch.where(done, frozen[0], best), torch.where(done, frozen[1], word)


def candidate_scores(best: Tensor, total: Tensor, grown: Tensor, length_penalty: float) -> Tensor:
    """Ranking scores (total + log p) / grown^alpha of the candidates ``best`` (R, K), without gradients (they
    only rank); alpha = 0 divides by nothing."""
    ranked = best.detach() + total.detach()[:, None]  # (R, K)
    return ranked if length_penalty == 0 else ranked / grown[:, None] ** length_penalty
