"""Cross-entropy (teacher forcing) objective: NG-SAN section 5.1, M2 section 3.3 (first stage)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vlattn.training.loop import Batch, Objective


def xe_loss(
    logits: torch.Tensor, targets: torch.Tensor, *, pad_id: int = 0, label_smoothing: float = 0.0,
    tokens_per_batch: float | None = None,
) -> torch.Tensor:
    """Token cross-entropy ignoring padding: the mean over the batch's tokens, or, with ``tokens_per_batch``, their
    sum divided by that fixed number.

    logits: (B, T, V); targets: (B, T) token ids, ``pad_id`` positions ignored. Label smoothing
    spreads ``label_smoothing`` of the mass uniformly over the vocabulary (``F.cross_entropy``). A fixed divisor
    gives every token the same weight in every batch, also when batches differ in their number of tokens (batches
    of similar lengths, ``train.length_buckets``): the per-batch mean would weigh a token of a batch of short
    captions more than one of a batch of long captions.
    """
    loss = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        targets.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
        reduction="mean" if tokens_per_batch is None else "sum",
    )
    return loss if tokens_per_batch is None else loss / tokens_per_batch


def xe_objective(*, pad_id: int = 0, label_smoothing: float = 0.0, tokens_per_batch: float | None = None) -> Objective:
    """The XE objective for :class:`vlattn.training.loop.Trainer`; batches come from ``collate_train``;
    ``tokens_per_batch``: see :func:`xe_loss`."""

    def objective(model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        tokens = batch["tokens"]  # (B, T+2): BOS w1 .. wn EOS PAD ..
        logits = model(batch, tokens[:, :-1])  # (B, T+1, V); the batch is the model's input mapping
        loss = xe_loss(logits, tokens[:, 1:], pad_id=pad_id, label_smoothing=label_smoothing,
                       tokens_per_batch=tokens_per_batch)
        return loss, {}

    return objective
