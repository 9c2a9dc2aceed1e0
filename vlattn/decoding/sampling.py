"""Greedy decoding, multinomial sampling (the k-sample rollouts of self-critical training, Rennie et al. 2017; "new
self-critical" / M2 Sec. 3.3 with k samples per image) and forced decoding of given captions (the steps decoding
took to them, e.g. to record the attention along a beam's ancestry).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, NamedTuple

import torch
from torch import Tensor

from vlattn.decoding.common import Generator, extend, first_step


class Samples(NamedTuple):
    """``tokens`` (B, k, L) without BOS, EOS included, ``pad`` after it; ``log_probs`` (B, k, L) per token
    (0 after EOS), differentiable. ``L <= max_len``."""

    tokens: Tensor
    log_probs: Tensor


def rollout(
    model: Generator,
    inputs: Mapping[str, Any],
    *,
    bos: int,
    eos: int,
    pad: int,
    max_len: int,
    copies: int,
    choose: Callable[[Tensor], Tensor],
) -> Samples:
    """Decode ``copies`` sequences per image, picking each word with ``choose(log_probs (R,V)) -> (R,)``."""
    first, state, prefix, rows = first_step(model, inputs, bos, copies)
    batch = first.shape[0]
    log_probs = first[rows]  # (R, V), R = B * copies
    finished = torch.zeros(prefix.shape[0], dtype=torch.bool, device=prefix.device)
    chosen = []
    for t in range(max_len):
        if t:
            log_probs, state = model.step(prefix, state)  # (R, V)
        prefix, word, now_finished = extend(prefix, choose(log_probs), finished, pad, eos)
        chosen.append(log_probs.gather(1, word[:, None]).squeeze(1).masked_fill(finished, 0.0))
        del log_probs  # freed before the next step allocates its (R, V): the allocator can reuse the memory
        finished = now_finished
        if finished.all():
            break
    tokens = prefix[:, 1:].reshape(batch, copies, -1)  # (B, k, L)
    return Samples(tokens, torch.stack(chosen, dim=1).reshape(batch, copies, -1))


@torch.no_grad()
def greedy_decode(
    model: Generator,
    inputs: Mapping[str, Any],
    *,
    bos: int,
    eos: int,
    max_len: int = 20,
    pad: int = 0,
) -> Tensor:
    """Arg-max decoding: tokens (B, L) without BOS, EOS included, ``pad`` after it, ``L <= max_len``."""
    argmax = partial(torch.argmax, dim=-1)
    samples = rollout(
        model, inputs, bos=bos, eos=eos, pad=pad, max_len=max_len, copies=1, choose=argmax
    )
    return samples.tokens[:, 0]


def sample(
    model: Generator,
    inputs: Mapping[str, Any],
    *,
    bos: int,
    eos: int,
    num_samples: int = 5,
    max_len: int = 20,
    pad: int = 0,
    generator: torch.Generator | None = None,
) -> Samples:
    """``num_samples`` multinomial samples per image, with their per-token log-probs (gradients kept)."""

    def draw(log_probs: Tensor) -> Tensor:
        return torch.multinomial(log_probs.detach().exp(), 1, generator=generator).squeeze(1)

    return rollout(
        model, inputs, bos=bos, eos=eos, pad=pad, max_len=max_len, copies=num_samples, choose=draw
    )


def forced_decode(model: Generator, inputs: Mapping[str, Any], tokens: Tensor, *, bos: int, eos: int,
                  pad: int = 0) -> Samples:
    """Step the model through given captions ``tokens`` (B, L) (without BOS; each ended by ``eos`` with ``pad``
    after it, or by the width L, as decoders return them) as decoding does, one ``step`` per word from the cached
    state: ``Samples`` of those tokens (B, 1, L') with each word's log-probability (0 after EOS), L' <= L the
    longest caption. A caption's words depend only on its prefix, so the calls are those that produced it,
    whichever decoder (greedy, beam) chose it."""
    steps = iter(tokens.unbind(dim=1))
    return rollout(model, inputs, bos=bos, eos=eos, pad=pad, max_len=tokens.shape[1], copies=1,
                   choose=lambda log_probs: next(steps))
