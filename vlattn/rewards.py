"""The SCST reward of a data set: CIDEr-D with document frequencies of its training references.

The document-frequency table is cached next to the data (``<data root>/cache/cider_df_<mode>.npz``) and
rebuilt automatically when the references, the tokenisation or the mode change (the table records a
fingerprint of all of them).
"""

from __future__ import annotations

from typing import Callable

import torch

from vlattn.metrics import CiderDocumentFrequency, CiderReward
from vlattn.pipeline import CaptionData

RewardFn = Callable[[torch.Tensor, list[int]], torch.Tensor]

# References are the Karpathy split file's tokens (PTB-tokenised, lowercase, no punctuation).
TOKENIZATION = "karpathy-tokens"


def training_reward(data: CaptionData, *, mode: str = "image", include_eos: bool = False) -> RewardFn:
    """``reward(tokens (N, L) ids, image_ids (B,)) -> (N,)`` rewards; samples of image b are rows b*k..b*k+k-1."""
    entries = data.entries["train"]
    references = {e.image_id: [" ".join(tokens) for tokens in e.captions] for e in entries}
    table = CiderDocumentFrequency.cached(
        data.root / "cache" / f"cider_df_{mode}.npz", list(references.values()), mode=mode,
        eos_token=data.vocab.itos[data.vocab.EOS], tokenization=TOKENIZATION,
    )
    scorer = CiderReward(table, include_eos, vocabulary=data.vocab.itos)

    def reward(tokens: torch.Tensor, image_ids: list[int]) -> torch.Tensor:
        refs = [references[i] for i in image_ids]
        return torch.from_numpy(scorer(tokens.cpu().numpy(), refs)).float()

    return reward
