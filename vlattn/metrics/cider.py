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

from vlattn.metrics.ngrams import Layout, OrderCounts, count_ngrams, document_frequency, encode, paired_captions


def inverse_document_frequency(df: np.ndarray, num_documents: int) -> np.ndarray:
    """``log(N) - log(max(1, df))`` as in the COCO code."""
    return np.log(float(num_documents)) - np.log(np.maximum(1.0, df))


def cider_d_scores(
    layout: Layout, lengths: np.ndarray, counts: list[OrderCounts], idf: list[np.ndarray], sigma: float = 6.0
) -> np.ndarray:
    """(G,) CIDEr-D of each group's candidate against its references.

    ``lengths`` (S,) words per sentence; ``counts[k-1]`` the k-gram counts of the layout's sentences and
    ``idf[k-1]`` (G_k,) the idf of each of those k-grams.
    """
    num_sentences = len(layout.group)
    total = np.zeros(num_sentences)
    for order, order_idf in zip(counts, idf):
        weight = order.count * order_idf[order.ngram]  # (E,) tf-idf
        norm = np.sqrt(np.bincount(order.sentence, weight * weight, minlength=num_sentences))  # (S,)
        partner, found = layout.matches(order)
        clipped = np.where(found, np.minimum(weight[partner], weight) * weight, 0.0)
        dot = np.bincount(order.sentence, clipped, minlength=num_sentences)  # (S,), 0 for candidates
        denominator = norm[layout.candidate[layout.group]] * norm
        total += np.divide(dot, denominator, out=np.zeros(num_sentences), where=denominator != 0)
    bigrams = np.maximum(lengths - 1, 0) if len(counts) >= 2 else np.zeros_like(lengths)
    delta = (bigrams[layout.candidate[layout.group]] - bigrams).astype(np.float64)
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
        is_reference = ~layout.is_candidate
        idf = [
            inverse_document_frequency(document_frequency(order, layout.group, is_reference), len(candidates))
            for order in counts
        ]
        scores = cider_d_scores(layout, sentences.lengths, counts, idf, self.sigma)
        return np.mean(scores), scores

    def method(self) -> str:
        return "CIDEr"
