"""Cross-entropy (teacher forcing) objective: NG-SAN section 5.1, M2 section 3.3 (first stage)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vlattn.training.loop import Batch, Objective


def xe_loss(logits: torch.Tensor, targets: torch.Tensor, *, pad_id: int = 0, label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean token cross-entropy ignoring padding.

    logits: (B, T, V); targets: (B, T) token ids, ``pad_id`` positions ignored. Label smoothing
    spreads ``label_smoothing`` of the mass uniformly over the vocabulary (``F.cross_entropy``).
    """
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        targets.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )


def xe_objective(*, pad_id: int = 0, label_smoothing: float = 0.0) -> Objective:
    """The XE objective for :class:`vlattn.training.loop.Trainer`; batches come from ``collate_train``."""

    def objective(model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        tokens = batch["tokens"]  # (B, T+2): BOS w1 .. wn EOS PAD ..
        logits = model(batch, tokens[:, :-1])  # (B, T+1, V); the batch is the model's input mapping
        loss = xe_loss(logits, tokens[:, 1:], pad_id=pad_id, label_smoothing=label_smoothing)
        return loss, {}

    return objective
