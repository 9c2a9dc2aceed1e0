"""The corruptions of vision-language pretraining (LXMERT, Tan and Bansal 2019, Sec. 3.1), drawn per batch:

- :func:`mask_words`: BERT's masked language modelling (Devlin et al. 2019): each real word piece (never
  ``[CLS]``, ``[SEP]`` or ``[PAD]``) is chosen with probability ``rate``; a chosen piece becomes ``[MASK]`` with
  probability 0.8, a random piece with 0.1 and stays itself with 0.1, and is the label to predict.
- :func:`mask_regions`: masked object prediction: each real region is chosen with probability ``rate``. The paper
  masks "RoI features with zeros" (``zero``); the released code (``random_feat`` of ``lxmert_pretrain.py``) applies
  BERT's split to regions (``bert``): zeros with probability 0.8, the feature of a random region with 0.1 (the
  released code draws it from the whole data set, here from the real regions of the batch), unchanged with 0.1.
- :func:`draw_mismatches`: cross-modality matching: a sentence of another image in place of the pair's sentence,
  drawn uniformly from the whole training set (as the released ``LXMERTTorchDataset``: redrawn while it is of the
  same image).

Every draw comes from ``generator`` (None: the global generator, whose state a run's checkpoints keep, so a resumed
run draws what an uninterrupted one would).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from vlattn.data.pretraining import IGNORE

SPLIT = (0.8, 0.1)  # BERT's shares of the chosen items replaced by [MASK] / zeros, and by a random item
MAX_REDRAWS = 64  # draws per mismatched row before it is left matched (every other pair shows the same image)


def _choose(maskable: Tensor, rate: float, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """Chosen items (each of ``maskable`` with probability ``rate``) and, per item, a uniform draw in [0, 1) that
    splits the chosen ones 80/10/10."""
    draws = torch.rand(maskable.shape, generator=generator, device=maskable.device)
    split = torch.rand(maskable.shape, generator=generator, device=maskable.device)
    return maskable & (draws < rate), split


def mask_words(ids: Tensor, maskable: Tensor, *, rate: float, mask_id: int, replacements: Tensor,
               generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """``ids`` (B, L) with BERT's masking over the ``maskable`` (B, L) pieces -> (corrupted ids (B, L), labels
    (B, L): the original id where chosen, :data:`IGNORE` elsewhere). A random replacement is drawn uniformly from
    ``replacements`` (K,) ids (the vocabulary without its special entries)."""
    chosen, split = _choose(maskable, rate, generator)
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
    picks = torch.randint(len(replacements), ids.shape, generator=generator, device=ids.device)
    out = torch.where(chosen & (split < SPLIT[0]), torch.full_like(ids, mask_id), ids)
    random = chosen & (split >= SPLIT[0]) & (split < SPLIT[0] + SPLIT[1])
    return torch.where(random, replacements.to(ids.device)[picks], out), labels


def mask_regions(features: Tensor, region_mask: Tensor, *, rate: float, mode: Literal["zero", "bert"],
                 generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """``features`` (B, N, D) with masked object prediction's masking over the real regions (``region_mask``
    (B, N)) -> (corrupted features (B, N, D), chosen (B, N) bool: the regions to predict)."""
    chosen, split = _choose(region_mask, rate, generator)
    if mode == "zero":
        return features.masked_fill(chosen[..., None], 0.0), chosen
    real = features[region_mask]  # (R, D): what a random replacement is drawn from
    picks = torch.randint(len(real), chosen.shape, generator=generator, device=features.device)
    out = features.masked_fill((chosen & (split < SPLIT[0]))[..., None], 0.0)
    random = chosen & (split >= SPLIT[0]) & (split < SPLIT[0] + SPLIT[1])
    return torch.where(random[..., None], real[picks], out), chosen


def draw_mismatches(image_ids: Tensor, pool_images: Tensor, *, rate: float,
                    generator: torch.Generator | None = None) -> Tensor:
    """For each pair of a batch (its image ``image_ids`` (B,)), with probability ``rate``, the index of a pair of
    the pool (its images ``pool_images`` (P,)) about another image; -1: the pair keeps its own sentence."""
    rows = torch.rand(image_ids.shape, generator=generator) < rate
    out = torch.full(image_ids.shape, -1, dtype=torch.long)
    pending = rows.clone()
    for _ in range(MAX_REDRAWS):
        if not pending.any():
            break
        draws = torch.randint(len(pool_images), image_ids.shape, generator=generator)
        good = pending & (pool_images[draws] != image_ids)
        out = torch.where(good, draws, out)
        pending &= ~good
    return out
