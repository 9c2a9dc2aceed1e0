"""What the data offers to the ``prepare`` hooks of data-dependent initialisation (:mod:`vlattn.training.prepare`
runs them): models and their building blocks read it, the tasks' data objects make it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from vlattn.data.regions import RegionSampler
from vlattn.data.vocab import Vocabulary


@dataclass(frozen=True)
class PrepareResources:
    """What the data offers to ``prepare`` hooks.

    ``regions``: seeded draws of training region features (the raw store features, (n, D)), or None when
    the task has no regions; ``word_embeddings``: the model's word embedding table (V, d) itself (read it, never
    write it: what hooks that ran before wrote into it, such as word vectors, shows) and
    ``word_counts`` (V,) the occurrences of each word in the training text, or None; ``words``: the word
    vocabulary those rows belong to (pre-trained word vectors are looked up by word), or None; ``data_root``: the
    data set's directory (files a hook reads, such as CATT dictionary files, are relative to it), or None;
    ``generator``: this module's own seeded generator.
    """

    seed: int
    regions: RegionSampler | None = None
    word_embeddings: Tensor | None = None
    word_counts: Tensor | None = None
    data_root: Path | None = None
    words: Vocabulary | None = None
    generator: torch.Generator = dataclasses.field(default_factory=torch.Generator)
