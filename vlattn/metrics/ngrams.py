"""Vectorised n-gram counting shared by BLEU, CIDEr-D and the SCST CIDEr-D reward.

Sentences are encoded as one flat array of word ids. For each order k the n-grams of every sentence get
compact ids: a k-gram's key is ``id(its (k-1)-gram prefix) * base + id(its last word)`` (for k = 1 the
word id), and its id is the rank of its key among the distinct keys. Counts come back as sparse entries
sorted by (n-gram id, sentence), which lets callers group, clip and join without Python loops.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Hashable, Mapping, Sequence

import numpy as np

Caption = str | Sequence[str]  # a whitespace-separated string or a list of tokens without whitespace
_SEPARATOR = "\x00"


@dataclass(frozen=True)
class Encoded:
    """Sentences as word ids: ``words`` (T,) concatenated, ``lengths`` (S,), ``base`` > every word id."""

    words: np.ndarray
    lengths: np.ndarray
    base: int


@dataclass(frozen=True)
class OrderCounts:
    """The k-grams of every sentence, one entry per (n-gram, sentence), sorted by (n-gram, sentence).

    ``ngram``, ``sentence``, ``count`` are (E,) int64; ``keys`` (G,) are the sorted distinct keys (id = index).
    """

    ngram: np.ndarray
    sentence: np.ndarray
    count: np.ndarray
    keys: np.ndarray


def encode(captions: Sequence[Caption], vocab: dict[str, int]) -> Encoded:
    """Word ids of whitespace-split captions (or token lists); unseen words are added to ``vocab``.

    All captions are split in one call, with a separator word between them (much faster than one split each).
    """
    if not captions:
        return Encoded(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), max(len(vocab), 1))
    text = f" {_SEPARATOR} ".join(c if isinstance(c, str) else " ".join(c) for c in captions)
    if text.count(_SEPARATOR) != len(captions) - 1:
        raise ValueError("captions must not contain NUL characters")
    flat = text.split()
    separator = vocab[_SEPARATOR] = len(vocab)
    for word in dict.fromkeys(flat):
        vocab.setdefault(word, len(vocab))
    ids = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
    del vocab[_SEPARATOR]
    for word in islice(vocab, separator, None):  # the words added after the separator move down one id
        vocab[word] -= 1
    is_separator = ids == separator
    bounds = np.concatenate(([-1], np.flatnonzero(is_separator), [len(ids)]))
    words = ids[~is_separator]
    return Encoded(words - (words > separator), np.diff(bounds) - 1, max(len(vocab), 1))


def count_ngrams(sentences: Encoded, n: int) -> list[OrderCounts]:
    """Per-sentence counts of the n-grams of orders 1..n (list index k-1 holds order k)."""
    words, lengths = sentences.words, sentences.lengths
    sentence_of = np.repeat(np.arange(len(lengths)), lengths)
    remaining = np.repeat(np.cumsum(lengths), lengths) - np.arange(len(words))  # (T,) tokens left from here
    prefix_ids = words
    out: list[OrderCounts] = []
    for k in range(1, n + 1):
        starts = np.flatnonzero(remaining >= k)
        keys = words[starts] if k == 1 else prefix_ids[starts] * sentences.base + words[starts + k - 1]
        order = stable_argsort(keys)
        sorted_keys, sorted_starts = keys[order], starts[order]
        new_key = _changes(sorted_keys)
        ids = np.cumsum(new_key) - 1
        prefix_ids = np.full(len(words), -1, dtype=np.int64)
        prefix_ids[sorted_starts] = ids
        sentence = sentence_of[sorted_starts]
        first = np.flatnonzero(new_key | _changes(sentence))
        count = np.diff(np.append(first, len(ids)))
        out.append(OrderCounts(ids[first], sentence[first], count, sorted_keys[new_key]))
    return out


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """Stable argsort of non-negative int64 keys: LSD radix sort over 16-bit digits (numpy radix-sorts
    16-bit integers), several times faster than ``np.argsort(kind="stable")`` on int64 keys."""
    order = np.arange(len(keys))
    passes = (int(keys.max()).bit_length() + 15) // 16 if len(keys) else 0
    for shift in range(0, 16 * passes, 16):
        digit = ((keys[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
    return order


def document_frequency(counts: OrderCounts, document: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """(G,) number of distinct documents containing each n-gram.

    ``document`` (S,) maps sentences to documents and must be non-decreasing in the sentence index;
    ``keep`` (S,) bool restricts the count to some sentences (e.g. the references).
    """
    entries = slice(None) if keep is None else keep[counts.sentence]
    ngram = counts.ngram[entries]
    doc = document[counts.sentence[entries]]
    first = _changes(ngram) | _changes(doc)
    return np.bincount(ngram[first], minlength=len(counts.keys))


def _changes(values: np.ndarray) -> np.ndarray:
    """(N,) bool: True where ``values`` differs from the previous element (and at 0)."""
    out = np.ones(len(values), dtype=bool)
    np.not_equal(values[1:], values[:-1], out=out[1:])
    return out


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
        group = np.repeat(np.arange(len(sizes)), sizes)
        candidate = np.cumsum(sizes) - sizes
        is_candidate = np.zeros(len(captions), dtype=bool)
        is_candidate[candidate] = True
        return cls(captions, group, is_candidate, candidate, num_refs)

    def matches(self, counts: OrderCounts) -> tuple[np.ndarray, np.ndarray]:
        """For each entry: the entry of its group's candidate with the same n-gram, and whether it exists.

        Relies on the sort by (n-gram, sentence): a group's candidate entry precedes its references' entries.
        """
        from_candidate = self.is_candidate[counts.sentence]
        last = np.maximum.accumulate(np.where(from_candidate, np.arange(len(counts.ngram)), -1))
        partner = np.maximum(last, 0)
        group = self.group[counts.sentence]
        found = (last >= 0) & (counts.ngram[partner] == counts.ngram) & (group[partner] == group) & ~from_candidate
        return partner, found


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
