"""BLEU-1..n (Papineni et al. 2002) exactly as the COCO caption evaluation code computes it.

Clipped n-gram precisions against the per-n-gram maximum reference count, geometric mean up to each order,
brevity penalty ``exp(1 - r/c)`` when the candidate is shorter than the effective reference length. The
corpus score pools counts over all images; per-image scores use the same formula per image. The COCO code's
smoothing constants (1e-15 added to matches and lengths, 1e-9 to counts) are kept.
"""

from __future__ import annotations

from typing import Hashable, Mapping, Sequence

import numpy as np

from vlattn.metrics.ngrams import Layout, count_ngrams, encode, paired_captions

_TINY = 1e-15
_SMALL = 1e-9
REFLEN_OPTIONS = ("closest", "shortest", "average")


def effective_reference_lengths(
    candidate_len: np.ndarray, reference_len: np.ndarray, num_refs: np.ndarray, option: str
) -> np.ndarray:
    """(G,) reference length of each group for the brevity penalty: the closest to the candidate's (ties: the
    shorter), the shortest or the average. ``candidate_len`` (G,), ``reference_len`` (R,) grouped in order,
    ``num_refs`` (G,) >= 1."""
    group_start = np.cumsum(num_refs) - num_refs
    if option == "shortest":
        return np.minimum.reduceat(reference_len, group_start).astype(np.float64)
    if option == "average":
        return np.add.reduceat(reference_len, group_start) / num_refs
    distance = np.abs(reference_len - np.repeat(candidate_len, num_refs))
    # min over (distance, length): distance * (longest + 1) + length orders the pairs lexicographically
    scale = int(reference_len.max()) + 1
    best = np.minimum.reduceat(distance * scale + reference_len, group_start)
    return (best % scale).astype(np.float64)


def bleu_from_counts(correct: np.ndarray, guess: np.ndarray, test_len: np.ndarray, ref_len: np.ndarray) -> np.ndarray:
    """BLEU-1..n (..., n) from matched and total n-gram counts (..., n) and lengths (...)."""
    precision = (correct + _TINY) / (guess + _SMALL)
    bleu = np.cumprod(precision, axis=-1) ** (1.0 / np.arange(1, correct.shape[-1] + 1))
    ratio = (test_len + _TINY) / (ref_len + _SMALL)
    penalty = np.where(ratio < 1, np.exp(1 - 1 / np.minimum(ratio, 1.0)), 1.0)
    return bleu * penalty[..., None]


class Bleu:
    """BLEU with pycocoevalcap's ``Bleu(n).compute_score`` interface and numbers.

    Returns ``([BLEU-1, ..., BLEU-n], [[per-image BLEU-1], ..., [per-image BLEU-n]])``. ``reflen`` picks the
    effective reference length: ``"closest"`` (the COCO default), ``"shortest"`` or ``"average"``.
    """

    def __init__(self, n: int = 4, reflen: str = "closest") -> None:
        if reflen not in REFLEN_OPTIONS:
            raise ValueError(f"unknown reflen option {reflen!r}; valid: {', '.join(REFLEN_OPTIONS)}")
        self.n = n
        self.reflen = reflen

    def compute_score(
        self, gts: Mapping[Hashable, Sequence[str]], res: Mapping[Hashable, Sequence[str]]
    ) -> tuple[list[float], list[list[float]]]:
        candidates, references = paired_captions(gts, res)
        layout = Layout.build(candidates, references)
        sentences = encode(layout.captions, {})
        num_images = len(candidates)
        correct = np.zeros((num_images, self.n))
        for k, order in enumerate(count_ngrams(sentences, self.n)):
            runs = layout.runs(order)
            # Clip the candidate's count of each n-gram by its largest count in one reference.
            max_ref = np.maximum.reduceat(np.where(runs.from_candidate, 0, order.count), runs.start)
            clipped = np.where(runs.opened_by_candidate, np.minimum(order.count[runs.start], max_ref), 0)
            correct[:, k] = np.bincount(runs.group, clipped, minlength=num_images)
        test_len = sentences.lengths[layout.candidate]
        guess = np.maximum(0, test_len[:, None] - np.arange(self.n))
        ref_len = effective_reference_lengths(test_len, sentences.lengths[~layout.is_candidate], layout.num_refs, self.reflen)
        per_image = bleu_from_counts(correct, guess, test_len, ref_len)
        corpus = bleu_from_counts(correct.sum(0), guess.sum(0), test_len.sum(), ref_len.sum())
        return [float(x) for x in corpus], [col.tolist() for col in per_image.T]

    def method(self) -> str:
        return "Bleu"
