"""ROUGE-L (Lin 2004) exactly as the COCO caption evaluation code computes it.

Per image: the longest common subsequence (LCS) of the candidate with each reference, the best precision
``P = max LCS/|c|`` and best recall ``R = max LCS/|r|`` over references (taken independently), and
``F = (1 + beta^2) P R / (R + beta^2 P)`` with ``beta = 1.2``. Captions are split on single spaces, as there.
"""

from __future__ import annotations

from typing import Hashable, Mapping, Sequence

import numpy as np

from vlattn.metrics.ngrams import paired_captions


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence, bit-parallel over ``a`` (Allison-Dix / Hyyro)."""
    if not a or not b:
        return 0
    match: dict[str, int] = {}
    for i, token in enumerate(a):
        match[token] = match.get(token, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full  # zero bits mark LCS increments
    for token in b:
        u = v & match.get(token, 0)
        v = ((v + u) | (v - u)) & full
    return len(a) - v.bit_count()


def rouge_l(candidate: str, references: Sequence[str], beta: float = 1.2) -> float:
    """ROUGE-L F-score of one candidate against its references."""
    cand = candidate.split(" ")
    best_p = best_r = 0.0
    for reference in references:
        ref = reference.split(" ")
        lcs = lcs_length(cand, ref)
        best_p = max(best_p, lcs / float(len(cand)))
        best_r = max(best_r, lcs / float(len(ref)))
    if best_p == 0 or best_r == 0:
        return 0.0
    return ((1 + beta**2) * best_p * best_r) / float(best_r + beta**2 * best_p)


class Rouge:
    """ROUGE-L with pycocoevalcap's ``Rouge().compute_score`` interface: ``(mean, per-image scores (N,))``."""

    def __init__(self, beta: float = 1.2) -> None:
        self.beta = beta

    def compute_score(
        self, gts: Mapping[Hashable, Sequence[str]], res: Mapping[Hashable, Sequence[str]]
    ) -> tuple[np.float64, np.ndarray]:
        candidates, references = paired_captions(gts, res)
        scores = np.array([rouge_l(c, refs, self.beta) for c, refs in zip(candidates, references)])
        return np.mean(scores), scores

    def method(self) -> str:
        return "Rouge"
