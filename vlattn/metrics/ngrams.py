"""Vectorised n-gram counting shared by BLEU, CIDEr-D and the SCST CIDEr-D reward.

Sentences are encoded as one flat array of word ids (:mod:`vlattn.metrics.words`). For each order k the n-grams
of every sentence get compact ids: a k-gram's key is ``id(its (k-1)-gram prefix) * base + id(its last word)``
(for k = 1 the word id), and its id is the rank of its key among the distinct keys (one sort per order). Counts
come back as sparse entries sorted by (n-gram id, sentence); :class:`Layout` cuts them into runs of equal
(n-gram, group), which lets callers clip and join candidates with their references without Python loops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Mapping, Sequence

import numpy as np

from vlattn.metrics.words import word_ids

Caption = str | Sequence[str]  # a whitespace-separated string or a list of tokens without whitespace


@dataclass(frozen=True)
class Encoded:
    """Sentences as word ids: ``words`` (T,) int32 concatenated, ``lengths`` (S,), ``base`` > every word id."""

    words: np.ndarray
    lengths: np.ndarray
    base: int


@dataclass(frozen=True)
class OrderCounts:
    """The k-grams of every sentence, one entry per (n-gram, sentence), sorted by (n-gram, sentence).

    ``ngram``, ``sentence``, ``count`` are (E,) int32; ``keys`` (G,) int64 are the sorted distinct keys
    (id = index).
    """

    ngram: np.ndarray
    sentence: np.ndarray
    count: np.ndarray
    keys: np.ndarray


def encode(captions: Sequence[Caption], vocab: dict[str, int]) -> Encoded:
    """Word ids of whitespace-split captions (or token lists); unseen words are added to ``vocab``
    (word -> insertion index) in order of first occurrence. See :mod:`vlattn.metrics.words`."""
    ids, lengths = word_ids([c if isinstance(c, str) else " ".join(c) for c in captions], vocab)
    return Encoded(ids, lengths, max(len(vocab), 1))


def count_ngrams(sentences: Encoded, n: int) -> list[OrderCounts]:
    """Per-sentence counts of the n-grams of orders 1..n (list index k-1 holds order k)."""
    words, lengths = sentences.words, sentences.lengths
    total = len(words)
    if total >= 2**31:
        raise ValueError(f"{total} tokens exceed the int32 index range")
    sentence_of = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)  # (T,)
    remaining = np.repeat(np.cumsum(lengths), lengths) - np.arange(total)  # (T,) tokens left from here
    prefix_ids = words.astype(np.int64)  # (T,) id of the (k-1)-gram starting at each token
    out: list[OrderCounts] = []
    for k in range(1, n + 1):
        starts = np.flatnonzero(remaining >= k)
        keys = prefix_ids[starts] if k == 1 else prefix_ids[starts] * sentences.base + words[starts + k - 1]
        sorted_keys, sorted_starts = sort_by_key(keys, starts, total)
        new_key = _changes(sorted_keys)
        ids = np.cumsum(new_key, dtype=np.int32) - 1
        prefix_ids[sorted_starts] = ids
        sentence = sentence_of[sorted_starts]
        first = np.flatnonzero(new_key | _changes(sentence))
        count = np.diff(first, append=len(ids)).astype(np.int32)
        out.append(OrderCounts(ids[first], sentence[first], count, sorted_keys[new_key]))
    return out


def sort_by_key(keys: np.ndarray, positions: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """``keys`` (N,) non-negative int64 and increasing ``positions`` (N,) < ``limit``, both reordered by key,
    ties in position order (a stable sort by key).

    When key and position fit in 63 bits together, one ``np.sort`` of ``key << bits | position`` does it
    (numpy's SIMD sort, several times faster than an argsort); otherwise :func:`stable_argsort`.
    """
    bits = max(int(limit) - 1, 1).bit_length()
    if not len(keys) or int(keys.max()).bit_length() + bits > 63:
        order = stable_argsort(keys)
        return keys[order], positions[order]
    packed = (keys << bits) | positions
    packed.sort()
    return packed >> bits, packed & ((1 << bits) - 1)


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """Stable argsort of non-negative int64 keys: LSD radix sort over 16-bit digits (numpy radix-sorts
    16-bit integers), several times faster than ``np.argsort(kind="stable")`` on int64 keys."""
    order = np.arange(len(keys))
    passes = (int(keys.max()).bit_length() + 15) // 16 if len(keys) else 0
    for shift in range(0, 16 * passes, 16):
        digit = ((keys[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
    return order


def _changes(values: np.ndarray) -> np.ndarray:
    """(N,) bool: True where ``values`` differs from the previous element (and at 0)."""
    out = np.ones(len(values), dtype=bool)
    np.not_equal(values[1:], values[:-1], out=out[1:])
    return out


@dataclass(frozen=True)
class Runs:
    """One order's entries cut into runs of equal (n-gram, group).

    Entries are sorted by (n-gram, sentence) and a group's candidate precedes its references, so a group's
    candidate entry, when the candidate has the n-gram, opens the run. ``start`` (R,) first entry of each run,
    ``ngram`` (R,) and ``group`` (R,) its n-gram and group, ``opened_by_candidate`` (R,) bool;
    ``of_entry`` (E,) run of each entry, ``from_candidate`` (E,) bool.
    """

    start: np.ndarray
    ngram: np.ndarray
    group: np.ndarray
    opened_by_candidate: np.ndarray
    of_entry: np.ndarray
    from_candidate: np.ndarray

    def matched(self) -> tuple[np.ndarray, np.ndarray]:
        """The reference entries whose candidate has the same n-gram, and that candidate entry (each (M,))."""
        entries = np.flatnonzero(self.opened_by_candidate[self.of_entry] & ~self.from_candidate)
        return entries, self.start[self.of_entry[entries]]

    def reference_frequency(self, num_ngrams: int) -> np.ndarray:
        """(num_ngrams,) number of groups whose references hold each n-gram (CIDEr-D's document frequency)."""
        with_reference = ~self.opened_by_candidate | (np.diff(self.start, append=len(self.of_entry)) > 1)
        return np.bincount(self.ngram[with_reference], minlength=num_ngrams)


@dataclass(frozen=True)
class Layout:
    """Candidates and references laid out as consecutive groups ``[candidate, ref_1, ..., ref_m]``.

    ``group`` (S,) group of each sentence, ``is_candidate`` (S,) bool, ``candidate`` (G,) sentence index of
    each group's candidate, ``num_refs`` (G,).
    """

    captions: list[Caption]
    group: np.ndarray
    is_candidate: np.ndarray
    candidate: np.ndarray
    num_refs: np.ndarray

    @classmethod
    def build(cls, candidates: Sequence[Caption], references: Sequence[Sequence[Caption]]) -> "Layout":
        captions: list[Caption] = []
        for cand, refs in zip(candidates, references, strict=True):
            captions.append(cand)
            captions.extend(refs)
        num_refs = np.fromiter(map(len, references), dtype=np.int64, count=len(references))
        sizes = num_refs + 1
        group = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
        candidate = np.cumsum(sizes) - sizes
        is_candidate = np.zeros(len(captions), dtype=bool)
        is_candidate[candidate] = True
        return cls(captions, group, is_candidate, candidate, num_refs)

    def runs(self, counts: OrderCounts) -> Runs:
        """Cut ``counts`` (of this layout's sentences) into runs of equal (n-gram, group)."""
        group = self.group[counts.sentence]
        first = _changes(counts.ngram) | _changes(group)
        start = np.flatnonzero(first)
        from_candidate = self.is_candidate[counts.sentence]
        return Runs(
            start, counts.ngram[start], group[start], from_candidate[start],
            np.cumsum(first, dtype=np.int32) - 1, from_candidate,
        )


def document_frequency(counts: OrderCounts, document: np.ndarray) -> np.ndarray:
    """(G,) number of distinct documents containing each n-gram.

    ``document`` (S,) maps sentences to documents and must be non-decreasing in the sentence index.
    """
    doc = document[counts.sentence]
    first = _changes(counts.ngram) | _changes(doc)
    return np.bincount(counts.ngram[first], minlength=len(counts.keys))


def paired_captions(
    gts: Mapping[Hashable, Sequence[str]], res: Mapping[Hashable, Sequence[str]]
) -> tuple[list[str], list[Sequence[str]]]:
    """Candidates and reference lists in ``gts`` order, checking pycocoevalcap's input layout."""
    if gts.keys() != res.keys():
        raise ValueError(f"gts and res must have the same image ids ({len(gts)} vs {len(res)} ids)")
    for key in gts:
        if len(res[key]) != 1:
            raise ValueError(f"res[{key!r}] must hold exactly one caption, got {len(res[key])}")
        if len(gts[key]) == 0:
            raise ValueError(f"gts[{key!r}] has no reference captions")
    return [res[key][0] for key in gts], [gts[key] for key in gts]
