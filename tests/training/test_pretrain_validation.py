"""Pretraining validation's control for image use: masked pieces predicted again with another pair's image."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch
from torch import Tensor, nn

from vlattn.data.pretraining import IGNORE
from vlattn.models.pretraining import PretrainOutput
from vlattn.training.pretraining import PretrainOptions, Targets, other_image_rows, validation_metrics

VOCAB, REGIONS, DIM = 8, 2, 3


@pytest.mark.parametrize(("image_ids", "expected"), [
    ([5, 5, 7, 5, 9], [2, 2, 3, 4, 0]),  # the next row with another image, wrapping around
    ([3, 3], [-1, -1]),  # one image only: no row has another
    ([4], [-1]),
])
def test_other_image_rows_by_hand(image_ids: list[int], expected: list[int]) -> None:
    assert other_image_rows(torch.tensor(image_ids)).tolist() == expected


class Guesser(nn.Module):
    """Predicts every word piece as one class: the number in the first region's first feature (``reads``
    ``image``) or the sentence's second piece (``reads`` ``sentence``)."""

    def __init__(self, reads: str) -> None:
        super().__init__()
        self.reads = reads

    def forward(self, inputs: Mapping[str, Tensor]) -> PretrainOutput:
        questions, features = inputs["questions"], inputs["features"]
        rows, length = questions.shape
        guess = features[:, 0, 0].long() if self.reads == "image" else questions[:, 1]
        words = torch.nn.functional.one_hot(guess, VOCAB).float()[:, None, :].expand(rows, length, VOCAB)
        return PretrainOutput(words=words, matching=torch.zeros(rows, 2), objects=torch.zeros(rows, REGIONS, 2),
                              attributes=torch.zeros(rows, REGIONS, 2), features=torch.zeros(rows, REGIONS, DIM),
                              answers=torch.zeros(rows, 3))


def batch() -> tuple[dict[str, Tensor], Targets]:
    """Four pairs of images 1, 1, 2, 3 whose first feature holds the class 3, 3, 5, 3; each sentence's masked
    piece (position 1) is labelled with its own image's class."""
    image_ids, classes = torch.tensor([1, 1, 2, 3]), torch.tensor([3, 3, 5, 3])
    features = torch.zeros(4, REGIONS, DIM)
    features[:, 0, 0] = classes.float()
    questions = torch.stack([torch.tensor([2, int(c), 1]) for c in classes])
    words = torch.full((4, 3), IGNORE)
    words[:, 1] = classes
    inputs = {"image_ids": image_ids, "questions": questions, "question_mask": torch.ones(4, 3, dtype=torch.bool),
              "features": features, "boxes": torch.zeros(4, REGIONS, 4),
              "region_mask": torch.ones(4, REGIONS, dtype=torch.bool)}
    nothing = torch.zeros(4, REGIONS, dtype=torch.long)
    targets = Targets(words=words, matched=torch.ones(4, dtype=torch.long), features=features,
                      masked=torch.zeros(4, REGIONS, dtype=torch.bool), objects=nothing,
                      object_weights=nothing.float(), attributes=nothing, attribute_weights=nothing.float(),
                      answers=torch.full((4,), IGNORE))
    return inputs, targets


def test_a_model_reading_the_image_loses_its_words_with_other_images() -> None:
    # other images: rows 0 and 1 see image 2 (class 5: wrong), row 2 sees image 3 (class 3: wrong), row 3 sees
    # image 1 (class 3: right by coincidence) -> 1 of 4
    metrics = validation_metrics(Guesser("image"), [batch()], PretrainOptions(tasks=["words"]).resolved())
    assert metrics["words_accuracy"] == 100.0
    assert metrics["words_other_image_accuracy"] == 25.0


def test_a_model_reading_only_the_sentence_keeps_its_words_with_other_images() -> None:
    metrics = validation_metrics(Guesser("sentence"), [batch()], PretrainOptions(tasks=["words"]).resolved())
    assert metrics["words_accuracy"] == metrics["words_other_image_accuracy"] == 100.0
