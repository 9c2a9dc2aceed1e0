"""Question encoder of the VQA models: trainable word embeddings (optionally initialised from a GloVe-format
text file) followed by a single-layer LSTM (MCAN, Yu et al. 2019, Sec. 4: 300-d GloVe embeddings,
LSTM with d hidden units, one output per word).

Questions are padded after their last word, so a unidirectional LSTM's outputs at the real words never
depend on the padding (no packing needed); the padded outputs are masked by the attention that follows.

``model.word_vectors`` names a local GloVe-format file (:mod:`vlattn.data.word_vectors`); the encoder then
reads it in its ``prepare`` hook (:mod:`vlattn.training.prepare`), which runs once before the first epoch of
a fresh run: resumed runs, ``--init`` runs and evaluation load the trained embeddings instead, so the file
is not needed after training starts. Words absent from the file keep their random initialisation.
"""

from __future__ import annotations

from pathlib import Path

from torch import Tensor, nn

from vlattn.data.vocab import SPECIALS
from vlattn.data.word_vectors import read_word_vectors
from vlattn.errors import ConfigError
from vlattn.training.prepare import PrepareResources


class QuestionEncoder(nn.Module):
    """``forward(questions (B, L) word ids) -> (B, L, hidden)``."""

    def __init__(self, num_words: int, word_dim: int, hidden: int, pad_id: int = 0) -> None:
        super().__init__()
        self.word_embedding = nn.Embedding(num_words, word_dim, padding_idx=pad_id)
        self.lstm = nn.LSTM(word_dim, hidden, batch_first=True)

    def forward(self, questions: Tensor) -> Tensor:
        """Word ids (B, L) -> LSTM outputs (B, L, hidden)."""
        states, _ = self.lstm(self.word_embedding(questions))
        return states


class PretrainedQuestionEncoder(QuestionEncoder):
    """A :class:`QuestionEncoder` whose embeddings of the words found in ``word_vectors`` (a GloVe-format file
    of ``word_dim``-d vectors) are set by its ``prepare`` hook."""

    def __init__(self, num_words: int, word_dim: int, hidden: int, pad_id: int, word_vectors: str) -> None:
        super().__init__(num_words, word_dim, hidden, pad_id)
        self.word_vectors = word_vectors

    def prepare(self, resources: PrepareResources) -> str:
        """Copy the file's vectors into the embedding rows of the vocabulary's words; returns a note."""
        if resources.words is None:
            raise ConfigError("model.word_vectors: this task offers no word vocabulary to look the vectors up by")
        vectors = read_word_vectors(self.word_vectors, resources.words, self.word_embedding.embedding_dim)
        for index, vector in vectors.items():
            self.word_embedding.weight[index] = vector
        return f"word vectors for {len(vectors)} of {len(resources.words) - len(SPECIALS)} words from {Path(self.word_vectors).name}"


def question_encoder(num_words: int, word_dim: int, hidden: int, pad_id: int, word_vectors: str | None) -> QuestionEncoder:
    """The question encoder, initialised from ``word_vectors`` in its ``prepare`` hook when a file is given."""
    if word_vectors:
        return PretrainedQuestionEncoder(num_words, word_dim, hidden, pad_id, word_vectors)
    return QuestionEncoder(num_words, word_dim, hidden, pad_id)
