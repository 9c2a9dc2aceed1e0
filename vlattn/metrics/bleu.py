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


def effective_reference_length(candidate_len: int, reference_lens: Sequence[int], option: str) -> float:
    """The reference length for the brevity penalty: closest (ties: shorter), shortest or average."""
    if option == "closest":
        return min(reference_lens, key=lambda length: (abs(length - candidate_len), length))
    if option == "shortest":
        return min(reference_lens)
    return float(sum(reference_lens)) / len(reference_lens)


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
            _, found = layout.matches(order)
            # Runs: a candidate entry followed by the matching entries of its references (or a lone entry).
            run_start = np.flatnonzero(~found)
            max_ref = np.maximum.reduceat(np.where(found, order.count, 0), run_start)
            clipped = np.minimum(order.count[run_start], max_ref)
            image = layout.group[order.sentence[run_start]]
            correct[:, k] = np.bincount(image, clipped, minlength=num_images)
        test_len = sentences.lengths[layout.candidate]
        guess = np.maximum(0, test_len[:, None] - np.arange(self.n))
        ref_len = np.array([
            effective_reference_length(int(t), [len(r.split()) for r in refs], self.reflen)
            for t, refs in zip(test_len, references)
        ], dtype=np.float64)
        per_image = bleu_from_counts(correct, guess, test_len, ref_len)
        corpus = bleu_from_counts(correct.sum(0), guess.sum(0), test_len.sum(), ref_len.sum())
        return [float(x) for x in corpus], [col.tolist() for col in per_image.T]

    def method(self) -> str:
        return "Bleu"
