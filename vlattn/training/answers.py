"""The VQA objective: binary cross-entropy of the answer logits against soft targets (MCAN, Yu et al. 2019;
Teney et al. 2018), with the reduction of the released MCAN code (``BCELoss(reduction="sum")``: summed over
answers and questions) or the batch-size-independent alternatives.

Soft targets are the official accuracy of each candidate answer (:meth:`AnswerVocabulary.soft_scores`), so
the target score of the predicted answer is that prediction's VQA accuracy: the objective logs it as
``score`` (the training accuracy of the batch, in [0, 1]).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from vlattn.training.loop import Batch, Objective

Reduction = Literal["sum", "sum_answers", "mean"]


def answer_loss(logits: torch.Tensor, targets: torch.Tensor, reduction: Reduction = "sum") -> torch.Tensor:
    """BCE-with-logits of ``logits`` (B, A) against ``targets`` (B, A) in [0, 1]: ``sum`` over answers and
    questions (MCAN), ``sum_answers`` summed over answers and averaged over questions, ``mean`` over both."""
    if reduction == "mean":
        return F.binary_cross_entropy_with_logits(logits, targets)
    total = F.binary_cross_entropy_with_logits(logits, targets, reduction="sum")
    return total / logits.shape[0] if reduction == "sum_answers" else total


def predicted_scores(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The target score (B,) of each question's highest-scoring answer."""
    return targets.gather(1, logits.argmax(dim=1, keepdim=True)).squeeze(1)


def answer_objective(reduction: Reduction = "sum") -> Objective:
    """The VQA objective for :class:`vlattn.training.loop.Trainer`; batches come from ``collate_vqa``."""

    def objective(model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        logits = model(batch)  # (B, A); the batch is the model's input mapping
        targets = batch["targets"]
        score = float(predicted_scores(logits.detach(), targets).mean())
        return answer_loss(logits, targets, reduction), {"score": score}

    return objective
