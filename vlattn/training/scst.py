"""Self-critical sequence training (SCST): M2 section 3.3 and Eq. 10; Rennie et al. 2017.

The objective is a policy gradient on CIDEr-D with a baseline ``b``::

    L = - sum_i (r(w_i) - b_i) * log p(w_i)          (one term per sampled caption w_i)

``log p(w_i)`` is the sum of the sampled tokens' log-probabilities up to and including the first
end token. The sum over samples is normalised in one of two ways (``train.scst_loss_normalise``):

* ``tokens`` (default) — divided by the number of such tokens in the batch (self-critical.pytorch), so the
  gradient scale depends neither on the batch size nor on the caption lengths' total;
* ``steps`` — each sample's term divided by the number of decoding steps ``max_len`` (the released M2
  ``train.py``: ``-mean(log_probs, -1) * (reward - baseline)`` over its 20 beam-search steps, whose
  log-probabilities are 0 after the end token), then the mean over the samples. Longer captions therefore
  weigh more than under ``tokens``.

Baselines (named in ``train.scst_baseline``):

* ``mean`` — M2 Eq. 10: the mean reward of the k samples of the same image (all k, the sample itself
  included).
* ``mean-others`` — "new self-critical" (Luo 2020): the mean reward of the *other* k-1 samples, an
  unbiased leave-one-out estimate.
* ``greedy`` — Rennie et al.: the reward of the greedy-decoded caption of the image.
"""

from __future__ import annotations

from typing import Callable

import torch

from vlattn.data.vocab import Vocabulary
from vlattn.decoding import beam_search, greedy_decode, sample
from vlattn.decoding.active import skipping_finished
from vlattn.decoding.common import Generator
from vlattn.training.loop import Batch, Objective


def sequence_mask(samples: torch.Tensor, eos: int) -> torch.Tensor:
    """(N, T) bool: True for tokens up to and including the first ``eos`` of each row."""
    is_eos = samples == eos  # (N, T)
    before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()  # number of EOS strictly before t
    return before == 0


def scst_loss(
    log_probs: torch.Tensor, samples: torch.Tensor, rewards: torch.Tensor, baseline: torch.Tensor, *, eos: int,
    normalise: str = "tokens", steps: int | None = None,
) -> torch.Tensor:
    """Policy-gradient loss of Eq. 10.

    log_probs: (N, T) log-probability of each sampled token (differentiable);
    samples: (N, T) sampled token ids (without BOS); rewards, baseline: (N,) (no gradient).
    ``normalise``: ``tokens`` or ``steps`` (module docstring); ``steps`` divides by ``steps`` (the decoding
    length, default T; a search that stopped early returns T < max_len columns).
    """
    mask = sequence_mask(samples, eos).to(log_probs.dtype)  # (N, T)
    advantage = (rewards - baseline).detach().to(log_probs.dtype)  # (N,)
    weighted = -(advantage[:, None] * log_probs * mask)  # (N, T)
    if normalise == "steps":
        return weighted.sum(dim=1).mean() / (steps if steps is not None else samples.shape[1])
    if normalise != "tokens":
        raise ValueError(f"unknown SCST loss normalisation {normalise!r}; valid: tokens, steps")
    return weighted.sum() / mask.sum().clamp(min=1.0)


def mean_baseline(rewards: torch.Tensor) -> torch.Tensor:
    """M2: rewards (B, k) -> baseline (B, k), the mean over the k samples of each image."""
    return rewards.mean(dim=1, keepdim=True).expand_as(rewards)


def mean_others_baseline(rewards: torch.Tensor) -> torch.Tensor:
    """Leave-one-out: rewards (B, k) -> (B, k), the mean of the other k-1 samples (needs k >= 2)."""
    k = rewards.size(1)
    if k < 2:
        raise ValueError("the mean-others baseline needs at least 2 samples per image")
    return (rewards.sum(dim=1, keepdim=True) - rewards) / (k - 1)


def greedy_baseline(greedy_rewards: torch.Tensor, k: int) -> torch.Tensor:
    """Rennie et al.: greedy_rewards (B,) -> (B, k), the greedy caption's reward for every sample."""
    return greedy_rewards[:, None].expand(-1, k)


SAMPLE_BASELINES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "mean": mean_baseline,
    "mean-others": mean_others_baseline,
}
BASELINES = (*SAMPLE_BASELINES, "greedy")


def scst_objective(
    *,
    reward: Callable[[torch.Tensor, list[int]], torch.Tensor],
    vocab: Vocabulary,
    sampling: str = "beam",
    baseline: str = "mean",
    num_samples: int = 5,
    max_len: int = 20,
    normalise: str = "tokens",
    skip_finished: bool = False,
) -> Objective:
    """The SCST objective for :class:`~vlattn.training.loop.Trainer` (batches from ``collate_eval``).

    ``sampling``: ``beam`` (M2: the k beams of a beam search, log-probs kept differentiable) or
    ``sample`` (k multinomial samples). ``baseline``: one of :data:`BASELINES`. ``normalise``: see
    :func:`scst_loss` (``steps`` divides by ``max_len``). ``skip_finished``: draw the samples without computing
    the images whose samples have all ended (:mod:`vlattn.decoding.active`, models with ``select_images``): the same
    samples and log-probabilities for the same dropout masks, less work, but dropout draws fewer random numbers.
    ``reward(tokens (N, L), image_ids) -> (N,)`` scores the captions of the images in order.
    """
    if sampling not in SAMPLERS:
        raise ValueError(f"unknown SCST sampling {sampling!r}; valid: {', '.join(SAMPLERS)}")
    if baseline not in BASELINES:
        raise ValueError(f"unknown SCST baseline {baseline!r}; valid: {', '.join(BASELINES)}")
    draw = SAMPLERS[sampling]

    def objective(model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        image_ids = batch["image_ids"].tolist()
        generator = skipping_finished(model, vocab.EOS) if skip_finished else model
        tokens, log_probs = draw(generator, batch, bos=vocab.BOS, eos=vocab.EOS, pad=vocab.PAD, k=num_samples,
                                 max_len=max_len)  # (B, k, L) each
        b, k, length = tokens.shape
        rewards = reward(tokens.reshape(b * k, length), image_ids).to(log_probs.device).view(b, k)  # (B, k)
        if baseline == "greedy":
            model.eval()
            greedy = greedy_decode(model, batch, bos=vocab.BOS, eos=vocab.EOS, pad=vocab.PAD, max_len=max_len)
            model.train()
            base = greedy_baseline(reward(greedy, image_ids).to(log_probs.device), k)
        else:
            base = SAMPLE_BASELINES[baseline](rewards)
        loss = scst_loss(log_probs.reshape(b * k, length), tokens.reshape(b * k, length), rewards.reshape(-1),
                         base.reshape(-1), eos=vocab.EOS, normalise=normalise, steps=max_len)
        return loss, {"reward": float(rewards.mean()), "baseline": float(base.mean())}

    return objective


def _beam_samples(model: Generator, inputs: Batch, *, bos: int, eos: int, pad: int, k: int,
                  max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    beams = beam_search(model, inputs, bos=bos, eos=eos, pad=pad, beam_size=k, max_len=max_len, grad=True)
    return beams.tokens, beams.log_probs


def _multinomial_samples(model: Generator, inputs: Batch, *, bos: int, eos: int, pad: int, k: int,
                         max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    samples = sample(model, inputs, bos=bos, eos=eos, pad=pad, num_samples=k, max_len=max_len)
    return samples.tokens, samples.log_probs


SAMPLERS = {"beam": _beam_samples, "sample": _multinomial_samples}
