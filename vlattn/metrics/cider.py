"""CIDEr-D (Vedantam et al. 2015) exactly as the COCO caption evaluation code computes it.

Per image: tf-idf vectors of the 1..4-grams (idf ``log(N) - log(max(1, df))``, N images, df = number of
images whose reference set contains the n-gram), for each reference the clipped cosine
``sum min(c, r) * r / (|c| |r|)`` per order times the Gaussian length penalty ``exp(-delta^2 / (2 sigma^2))``,
averaged over orders and references, times 10. Two quirks of the reference code are kept on purpose:
the length ``delta`` is a difference of bigram counts (``max(len - 1, 0)``), and a norm of zero skips the
division.
"""

from __future__ import annotations

from typing import Hashable, Mapping, Sequence

import numpy as np

from vlattn.metrics.ngrams import Layout, OrderCounts, Runs, count_ngrams, encode, paired_captions


def inverse_document_frequency(df: np.ndarray, num_documents: int) -> np.ndarray:
    """``log(N) - log(max(1, df))`` as in the COCO code."""
    return np.log(float(num_documents)) - np.log(np.maximum(1.0, df))


def cider_d_scores(
    layout: Layout, lengths: np.ndarray, counts: list[OrderCounts], runs: list[Runs], idf: list[np.ndarray],
    sigma: float = 6.0,
) -> np.ndarray:
    """(G,) CIDEr-D of each group's candidate against its references.

    ``lengths`` (S,) words per sentence; ``counts[k-1]`` the k-gram counts of the layout's sentences,
    ``runs[k-1]`` their runs (:meth:`Layout.runs`) and ``idf[k-1]`` (G_k,) the idf of each of those k-grams.
    """
    num_sentences = len(layout.group)
    candidate_of = layout.candidate[layout.group]  # (S,)
    total = np.zeros(num_sentences)
    for order, order_runs, order_idf in zip(counts, runs, idf):
        weight = order.count * order_idf[order.ngram]  # (E,) tf-idf
        norm = np.sqrt(np.bincount(order.sentence, weight * weight, minlength=num_sentences))  # (S,)
        entries, partner = order_runs.matched()  # (M,) reference entries and their candidate's entries
        clipped = np.minimum(weight[partner], weight[entries]) * weight[entries]
        dot = np.bincount(order.sentence[entries], clipped, minlength=num_sentences)  # (S,), 0 for candidates
        denominator = norm[candidate_of] * norm
        total += np.divide(dot, denominator, out=np.zeros(num_sentences), where=denominator != 0)
    bigrams = np.maximum(lengths - 1, 0) if len(counts) >= 2 else np.zeros_like(lengths)
    delta = (bigrams[candidate_of] - bigrams).astype(np.float64)
    total *= np.e ** (-(delta**2) / (2 * sigma**2))
    total[layout.is_candidate] = 0.0
    per_group = np.bincount(layout.group, total, minlength=len(layout.candidate))
    return per_group / len(counts) / layout.num_refs * 10.0


class CiderD:
    """CIDEr-D with pycocoevalcap's ``Cider().compute_score`` interface and numbers.

    ``compute_score(gts, res)`` with ``{image_id: [tokenised caption, ...]}`` (one caption per id in ``res``)
    returns ``(mean score, per-image scores (N,))``; document frequencies come from the evaluated references.
    """

    def __init__(self, n: int = 4, sigma: float = 6.0) -> None:
        self.n = n
        self.sigma = sigma

    def compute_score(
        self, gts: Mapping[Hashable, Sequence[str]], res: Mapping[Hashable, Sequence[str]]
    ) -> tuple[np.float64, np.ndarray]:
        candidates, references = paired_captions(gts, res)
        layout = Layout.build(candidates, references)
        sentences = encode(layout.captions, {})
        counts = count_ngrams(sentences, self.n)
        runs = [layout.runs(order) for order in counts]
        idf = [
            inverse_document_frequency(r.reference_frequency(len(order.keys)), len(candidates))
            for order, r in zip(counts, runs)
        ]
        scores = cider_d_scores(layout, sentences.lengths, counts, runs, idf, self.sigma)
        return np.mean(scores), scores

    def method(self) -> str:
        return "CIDEr"
