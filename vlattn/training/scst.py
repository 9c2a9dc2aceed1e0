"""Self-critical sequence training (SCST): M2 section 3.3 and Eq. 10; Rennie et al. 2017.

The objective is a policy gradient on CIDEr-D with a baseline ``b``::

    L = - sum_i (r(w_i) - b_i) * log p(w_i)          (one term per sampled caption w_i)

``log p(w_i)`` is the sum of the sampled tokens' log-probabilities up to and including the first
end token. We normalise the loss by the number of such tokens in the batch (as self-critical.pytorch
does), so the gradient scale does not depend on the batch size.

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


def sequence_mask(samples: torch.Tensor, eos: int) -> torch.Tensor:
    """(N, T) bool: True for tokens up to and including the first ``eos`` of each row."""
    is_eos = samples == eos  # (N, T)
    before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()  # number of EOS strictly before t
    return before == 0


def scst_loss(
    log_probs: torch.Tensor, samples: torch.Tensor, rewards: torch.Tensor, baseline: torch.Tensor, *, eos: int
) -> torch.Tensor:
    """Policy-gradient loss of Eq. 10.

    log_probs: (N, T) log-probability of each sampled token (differentiable);
    samples: (N, T) sampled token ids (without BOS); rewards, baseline: (N,) (no gradient).
    """
    mask = sequence_mask(samples, eos).to(log_probs.dtype)  # (N, T)
    advantage = (rewards - baseline).detach().to(log_probs.dtype)  # (N,)
    return -(advantage[:, None] * log_probs * mask).sum() / mask.sum().clamp(min=1.0)


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
