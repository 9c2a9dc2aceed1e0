"""A trained VQA model for Python callers (:func:`vlattn.load`): the model with its question and answer
vocabularies, answering questions about region features given as arrays or read from a feature store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vlattn.config import Config
from vlattn.data.features.base import FeatureStore
from vlattn.data.vocab import Vocabulary
from vlattn.data.vqa import Question, VQADataset, question_tokens
from vlattn.data.vqa_answers import AnswerVocabulary
from vlattn.errors import ConfigError, DataError
from vlattn.tasks.inputs import reads_boxes, region_source
from vlattn.tasks.vqa import checkpoint_vocabularies, load_model, predict
from vlattn.training.checkpoint import Checkpoint


@dataclass(frozen=True)
class Answer:
    """A candidate ``answer`` and its ``score``, the sigmoid of the model's logit (0-1; the scores of one
    question's candidates are independent, as the model is trained with binary cross-entropy)."""

    answer: str
    score: float


class Answerer:
    """A trained VQA model. ``words`` is the question vocabulary, ``answers`` the candidate answers;
    ``batch_size`` (the run's ``eval.batch_size``) and ``top`` (answers returned per question) are defaults to
    change as attributes; ``reads_boxes`` tells whether the model needs region boxes beside the features."""

    def __init__(self, model: nn.Module, config: Config, words: Vocabulary, answers: AnswerVocabulary,
                 device: torch.device) -> None:
        self.model, self.config, self.words, self.answers, self.device = model, config, words, answers, device
        self.batch_size, self.top = config.eval.batch_size, 5
        self.reads_boxes = reads_boxes(config.model)

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, device: torch.device) -> Answerer:
        words, answers = checkpoint_vocabularies(checkpoint)
        return cls(load_model(checkpoint, words, answers, None, device), checkpoint.config, words, answers, device)

    def answer(
        self,
        questions: str | Sequence[str],
        features: Any = None,
        *,
        boxes: Any = None,
        store: str | Path | FeatureStore | None = None,
        ids: Sequence[int] | None = None,
        top: int | None = None,
    ) -> list[list[Answer]]:
        """The ``top`` best answers (best first) of each question. Images as for
        :meth:`vlattn.tasks.captioner.Captioner.caption`: ``features`` (with ``boxes`` when :attr:`reads_boxes`)
        or a ``store`` with ``ids``. Questions and images pair up in order; one question is asked of every image,
        and every question of a single image."""
        count = top if top is not None else self.top
        if count < 1:
            raise ConfigError(f"top: must be >= 1, got {count}")
        texts = [questions] if isinstance(questions, str) else list(questions)
        for text in texts:
            if not isinstance(text, str) or not question_tokens(text):
                raise DataError("the question has no words", item=text)
        source, images = region_source(self.config.model, features, boxes, store, ids)
        if len(texts) != len(images) and 1 not in (len(texts), len(images)):
            raise DataError(f"{len(texts)} questions for {len(images)} images: give one question per image, one "
                            "question for every image, or one image for every question")
        pairs = list(zip(texts * len(images) if len(texts) == 1 else texts,
                         images * len(texts) if len(images) == 1 else images))
        data = self.config.data
        dataset = VQADataset([Question(n, image, text) for n, (text, image) in enumerate(pairs)], None, source,
                             self.words, None, max_regions=data.max_regions, max_question_len=data.max_question_len,
                             zero_image=data.zero_image)
        scores = predict(self.model, dataset, batch_size=self.batch_size, device=self.device)
        best = [scores[n].topk(min(count, len(self.answers))) for n in range(len(pairs))]
        return [[Answer(self.answers.itos[i], float(s)) for s, i in zip(row.values.tolist(), row.indices.tolist())]
                for row in best]
