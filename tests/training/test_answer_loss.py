"""The VQA objective: binary cross-entropy against soft targets with MCAN's summed reduction or the averaged
ones, computed by hand; the logged score is the target score of the predicted answer."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from vlattn.training.answers import answer_loss, answer_objective


def bce(logit: float, target: float) -> float:
    p = 1 / (1 + math.exp(-logit))
    return -(target * math.log(p) + (1 - target) * math.log(1 - p))


def test_reductions_by_hand() -> None:
    logits = torch.tensor([[0.0, 2.0, -1.0], [1.0, -3.0, 0.5]])
    targets = torch.tensor([[1.0, 0.3, 0.0], [0.0, 0.0, 0.9]])
    terms = [bce(logit, t) for logit, t in zip(logits.flatten().tolist(), targets.flatten().tolist())]
    assert answer_loss(logits, targets, "sum").item() == pytest.approx(sum(terms), rel=1e-6)
    assert answer_loss(logits, targets, "sum_answers").item() == pytest.approx(sum(terms) / 2, rel=1e-6)
    assert answer_loss(logits, targets, "mean").item() == pytest.approx(sum(terms) / 6, rel=1e-6)
    # the released code: sigmoid, then BCELoss(reduction="sum")
    released = nn.BCELoss(reduction="sum")(torch.sigmoid(logits), targets)
    torch.testing.assert_close(answer_loss(logits, targets, "sum"), released)


def test_objective_logs_the_score_of_the_predicted_answer() -> None:
    class Fixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.logits = nn.Parameter(torch.tensor([[0.1, 3.0, -1.0], [2.0, 0.0, 0.5]]))

        def forward(self, inputs):
            return self.logits

    batch = {"targets": torch.tensor([[1.0, 0.6, 0.0], [0.3, 0.0, 1.0]])}
    loss, logs = answer_objective("mean")(Fixed(), batch)
    assert logs["score"] == pytest.approx((0.6 + 0.3) / 2)  # answers 1 and 0 are predicted
    loss.backward()
