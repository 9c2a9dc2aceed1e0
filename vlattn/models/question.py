"""Question encoder of the VQA models: trainable word embeddings (optionally initialised from a GloVe-format
text file) followed by a single-layer LSTM (MCAN, Yu et al. 2019, Sec. 4: 300-d GloVe embeddings,
LSTM with d hidden units, one output per word) or a bi-directional one (the twin-stream SLA model, Fan & Zhou
2018, Sec. 4.1.2: 300-d embeddings, bi-LSTM with 512 units per direction).

Questions are padded after their last word, so a unidirectional LSTM's outputs at the real words never
depend on the padding (no packing needed); the padded outputs are masked by the attention that follows. The
backward direction of a bi-LSTM would read the padding first, so the bi-directional encoder packs the words
by the question mask (outputs are zero at padding).

``model.word_vectors`` names a local GloVe-format file (:mod:`vlattn.data.word_vectors`); the encoder then
reads it in its ``prepare`` hook (:mod:`vlattn.training.prepare`), which runs once before the first epoch of
a fresh run: resumed runs, ``--init`` runs and evaluation load the trained embeddings instead, so the file
is not needed after training starts. Words absent from the file keep their random initialisation.
"""

from __future__ import annotations

from pathlib import Path

from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from vlattn.data.resources import PrepareResources
from vlattn.data.vocab import SPECIALS
from vlattn.data.word_vectors import read_word_vectors
from vlattn.errors import ConfigError
from vlattn.layers.dropout import Dropout


class QuestionEncoder(nn.Module):
    """``forward(questions (B, L) word ids, mask (B, L)) -> (B, L, hidden)``, or (B, L, 2 hidden) with
    ``bidirectional`` (forward and backward states side by side). ``embedding_dropout`` > 0 adds dropout on the
    word embeddings before the LSTM (none otherwise)."""

    def __init__(self, num_words: int, word_dim: int, hidden: int, pad_id: int = 0, *,
                 bidirectional: bool = False, embedding_dropout: float = 0.0) -> None:
        super().__init__()
        self.word_embedding = nn.Embedding(num_words, word_dim, padding_idx=pad_id)
        self.word_dropout = Dropout(embedding_dropout) if embedding_dropout else nn.Identity()
        self.lstm = nn.LSTM(word_dim, hidden, batch_first=True, bidirectional=bidirectional)

    def forward(self, questions: Tensor, mask: Tensor | None = None) -> Tensor:
        """Word ids (B, L) -> LSTM outputs (B, L, hidden x directions); the bi-directional encoder needs the
        question ``mask`` (B, L) (True = word)."""
        words = self.word_dropout(self.word_embedding(questions))  # (B, L, E)
        if not self.lstm.bidirectional:
            return self.lstm(words)[0]
        if mask is None:
            raise ValueError("a bi-directional question encoder needs the question mask")
        lengths = mask.sum(dim=1).clamp(min=1).cpu()
        packed = pack_padded_sequence(words, lengths, batch_first=True, enforce_sorted=False)
        states, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=questions.shape[1])
        return states  # (B, L, 2H)


class PretrainedQuestionEncoder(QuestionEncoder):
    """A :class:`QuestionEncoder` whose embeddings of the words found in ``word_vectors`` (a GloVe-format file
    of ``word_dim``-d vectors) are set by its ``prepare`` hook."""

    def __init__(self, num_words: int, word_dim: int, hidden: int, pad_id: int, word_vectors: str, *,
                 bidirectional: bool = False, embedding_dropout: float = 0.0) -> None:
        super().__init__(num_words, word_dim, hidden, pad_id, bidirectional=bidirectional,
                         embedding_dropout=embedding_dropout)
        self.word_vectors = word_vectors

    def prepare(self, resources: PrepareResources) -> str:
        """Copy the file's vectors into the embedding rows of the vocabulary's words; returns a note."""
        if resources.words is None:
            raise ConfigError("model.word_vectors: this task offers no word vocabulary to look the vectors up by")
        vectors = read_word_vectors(self.word_vectors, resources.words, self.word_embedding.embedding_dim)
        for index, vector in vectors.items():
            self.word_embedding.weight[index] = vector
        return f"word vectors for {len(vectors)} of {len(resources.words) - len(SPECIALS)} words from {Path(self.word_vectors).name}"


def question_encoder(num_words: int, word_dim: int, hidden: int, pad_id: int, word_vectors: str | None, *,
                     bidirectional: bool = False, embedding_dropout: float = 0.0) -> QuestionEncoder:
    """The question encoder, initialised from ``word_vectors`` in its ``prepare`` hook when a file is given."""
    options = dict(bidirectional=bidirectional, embedding_dropout=embedding_dropout)
    if word_vectors:
        return PretrainedQuestionEncoder(num_words, word_dim, hidden, pad_id, word_vectors, **options)
    return QuestionEncoder(num_words, word_dim, hidden, pad_id, **options)
