"""LXMERT's pretraining heads (Tan and Bansal 2019, Sec. 3.1; the released ``src/lxrt/modeling.py`` and
transformers' ``LxmertForPreTraining`` compute them the same way) over any cross-modality encoder that offers
``encode(inputs) -> LxmertOutput``, ``word_embeddings`` and an answer classifier ``head`` (kind ``lxmert`` and its
variants):

- masked cross-modality language model: Linear(d, d), GeLU, LayerNorm over each word's output, then the word
  embedding table (tied: the input embeddings' weight, BERT's) plus a bias -> (B, L, V);
- cross-modality matching: Linear(d, 2) over the pooled vector (1 = the sentence describes the image);
- masked object prediction: Linear(d, d), GeLU, LayerNorm over each region's output, then one linear layer each
  for the detected object class (O), the attribute class (A) and the RoI feature (D);
- image question answering: the encoder's own answer classifier over the pooled vector (the released
  ``BertVisualAnswerHead`` has the fine-tuning classifier's shape), so ``head`` pretrains as the QA head.

:class:`PretrainingModel` keeps the encoder model as ``backbone`` and the heads as ``heads``; the backbone's
parameters keep their names under ``backbone.``, which is how a fine-tuning run loads them (``--init``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class PretrainOutput:
    """The heads' outputs for a batch of B pairs, L word pieces, N regions: ``words`` (B, L, V), ``matching``
    (B, 2), ``objects`` (B, N, O), ``attributes`` (B, N, A), ``features`` (B, N, D), ``answers`` (B, Q)."""

    words: Tensor
    matching: Tensor
    objects: Tensor
    attributes: Tensor
    features: Tensor
    answers: Tensor


class PredictionTransform(nn.Sequential):
    """BERT's prediction transform: Linear(w, d), GeLU, LayerNorm; (..., w) -> (..., d). w, the encoder's output
    width, is d, or 2d for LXMERT+CATT's concatenated streams."""

    def __init__(self, d_model: int, eps: float, in_dim: int | None = None) -> None:
        super().__init__(nn.Linear(in_dim or d_model, d_model), nn.GELU(), nn.LayerNorm(d_model, eps=eps))


class WordHead(nn.Module):
    """The masked language model's output: the transform, then the tied word table (passed in at each call, so
    the table stays the encoder's own parameter) plus a bias; (B, L, d) -> (B, L, V)."""

    def __init__(self, d_model: int, vocab_size: int, eps: float, in_dim: int | None = None) -> None:
        super().__init__()
        self.transform = PredictionTransform(d_model, eps, in_dim)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, states: Tensor, table: Tensor) -> Tensor:
        return F.linear(self.transform(states), table, self.bias)


class ObjectHead(nn.Module):
    """Masked object prediction's outputs: the transform, then per region the object logits (O), the attribute
    logits (A) and the regressed feature (D)."""

    def __init__(self, d_model: int, objects: int, attributes: int, feature_dim: int, eps: float,
                 in_dim: int | None = None) -> None:
        super().__init__()
        self.transform = PredictionTransform(d_model, eps, in_dim)
        self.objects = nn.Linear(d_model, objects)
        self.attributes = nn.Linear(d_model, attributes)
        self.features = nn.Linear(d_model, feature_dim)

    def forward(self, states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, N, d) -> object (B, N, O), attribute (B, N, A) logits and features (B, N, D)."""
        hidden = self.transform(states)
        return self.objects(hidden), self.attributes(hidden), self.features(hidden)


class PretrainingHeads(nn.Module):
    """The word, matching and object heads (the answer head is the backbone's ``head``); ``in_dim``: the width of
    the encoder's language and vision states when it is not d (the matching head reads the d-wide pooled vector)."""

    def __init__(self, d_model: int, vocab_size: int, objects: int, attributes: int, feature_dim: int,
                 eps: float, in_dim: int | None = None) -> None:
        super().__init__()
        self.words = WordHead(d_model, vocab_size, eps, in_dim)
        self.matching = nn.Linear(d_model, 2)
        self.regions = ObjectHead(d_model, objects, attributes, feature_dim, eps, in_dim)


class PretrainingModel(nn.Module):
    """An encoder model (``backbone``: ``encode``, ``head``, ``word_embeddings``) with LXMERT's pretraining heads:
    ``forward(inputs) -> PretrainOutput`` over the inputs of the backbone (``questions``, ``question_mask``,
    ``features``, ``boxes``, ``region_mask``)."""

    def __init__(self, backbone: nn.Module, heads: PretrainingHeads) -> None:
        super().__init__()
        self.backbone = backbone
        self.heads = heads

    @property
    def word_embeddings(self) -> nn.Embedding:
        return self.backbone.word_embeddings

    def backbone_layers(self) -> list[nn.Module]:
        return self.backbone.backbone_layers()

    def forward(self, inputs: Mapping[str, Tensor]) -> PretrainOutput:
        encoded = self.backbone.encode(inputs)
        objects, attributes, features = self.heads.regions(encoded.vision)
        return PretrainOutput(
            words=self.heads.words(encoded.language, self.backbone.word_embeddings.weight),
            matching=self.heads.matching(encoded.pooled),
            objects=objects, attributes=attributes, features=features,
            answers=self.backbone.head(encoded.pooled),
        )
