"""Question encoder of the VQA models: trainable word embeddings (optionally initialised from a GloVe-format
text file) followed by a single-layer LSTM (MCAN, Yu et al. 2019, Sec. 4: 300-d GloVe embeddings,
LSTM with d hidden units, one output per word).

Questions are padded after their last word, so a unidirectional LSTM's outputs at the real words never
depend on the padding (no packing needed); the padded outputs are masked by the attention that follows.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


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

    @torch.no_grad()
    def set_word_vectors(self, vectors: dict[int, Tensor]) -> None:
        """Overwrite the embeddings of the given word indices (e.g. GloVe vectors) in place."""
        for index, vector in vectors.items():
            self.word_embedding.weight[index] = vector
