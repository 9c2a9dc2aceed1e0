"""Glue between configs and the library: data from a ``DataConfig``, models, optimisers, stages.

This is the only module (besides the CLI) that reads configs; everything it calls takes explicit
arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from vlattn.config import Config, DataConfig
from vlattn.data.captioning import CaptionEvalSet, CaptionTrainSet
from vlattn.data.features import open_store
from vlattn.data.features.base import FeatureStore
from vlattn.data.karpathy import ImageEntry, load_karpathy
from vlattn.data.vocab import Vocabulary, build_vocabulary
from vlattn.errors import ConfigError
from vlattn.models import build_captioner

SPLITS = ("train", "val", "test")


@dataclass
class CaptionData:
    """Karpathy entries by split, the vocabulary and the feature store of one data set."""

    root: Path
    entries: dict[str, list[ImageEntry]]
    vocab: Vocabulary
    store: FeatureStore

    def train_set(self, cfg: DataConfig) -> CaptionTrainSet:
        return CaptionTrainSet(self.entries["train"], self.store, self.vocab, cfg.max_regions, cfg.max_caption_len)

    def eval_set(self, split: str, cfg: DataConfig, limit: int = 0) -> CaptionEvalSet:
        entries = self.entries[split][:limit] if limit > 0 else self.entries[split]
        return CaptionEvalSet(entries, self.store, cfg.max_regions)


def load_caption_data(cfg: DataConfig, vocab: Vocabulary | None = None) -> CaptionData:
    """Read the Karpathy file and feature store under ``cfg.root``; build the vocabulary unless given."""
    root = Path(cfg.root)
    entries = load_karpathy(root / cfg.karpathy)
    by_split = {split: [e for e in entries if e.split == split] for split in SPLITS}
    if vocab is None:
        vocab = build_vocabulary(entries, splits=tuple(cfg.vocab_splits), min_count=cfg.vocab_min_count)
    store = open_store(root / cfg.features)
    return CaptionData(root, by_split, vocab, store)


def build_model(cfg: Config, vocab: Vocabulary, store_dim: int | None = None) -> torch.nn.Module:
    """The captioner of ``cfg.model`` for ``vocab`` (checks the feature size against the store)."""
    if store_dim is not None and store_dim != cfg.model.feature_dim:
        raise ConfigError(
            f"model.feature_dim={cfg.model.feature_dim} but the feature store holds {store_dim}-d regions; "
            f"set --set model.feature_dim={store_dim}"
        )
    return build_captioner(cfg.model, len(vocab), pad_id=vocab.PAD)


def build_optimizer(model: torch.nn.Module, cfg: Config) -> torch.optim.Adam:
    """Adam as in every paper (betas from the config; lr is set by the schedule each step)."""
    betas = (float(cfg.train.adam_betas[0]), float(cfg.train.adam_betas[1]))
    return torch.optim.Adam(model.parameters(), lr=0.0, betas=betas, weight_decay=cfg.train.weight_decay)
