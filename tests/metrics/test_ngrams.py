"""The shared n-gram code: encoding, counting and the radix argsort."""

from __future__ import annotations

import numpy as np

from vlattn.metrics.ngrams import count_ngrams, encode, stable_argsort


def test_encode_keeps_vocabulary_contiguous() -> None:
    vocab = {"a": 0, "b": 1}
    encoded = encode(["a c", "", ["c", "d", "a"], "  b  "], vocab)
    assert vocab == {"a": 0, "b": 1, "c": 2, "d": 3}
    assert encoded.words.tolist() == [0, 2, 2, 3, 0, 1] and encoded.lengths.tolist() == [2, 0, 3, 1]
    assert encoded.base == 4
    assert encode([], {}).lengths.tolist() == []


def test_count_ngrams_hand_computed() -> None:
    counts = count_ngrams(encode(["a a b", "a b"], {}), 2)
    unigrams = sorted(zip(counts[0].ngram.tolist(), counts[0].sentence.tolist(), counts[0].count.tolist()))
    assert unigrams == [(0, 0, 2), (0, 1, 1), (1, 0, 1), (1, 1, 1)]  # a: 2 in s0, 1 in s1; b: 1 and 1
    bigram_keys = counts[1].keys.tolist()  # "a a" = 0 * 2 + 0, "a b" = 0 * 2 + 1
    assert bigram_keys == [0, 1]
    assert list(zip(counts[1].ngram.tolist(), counts[1].sentence.tolist())) == [(0, 0), (1, 0), (1, 1)]


def test_stable_argsort_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    for high in (3, 2**16, 2**40):
        keys = rng.integers(0, high, 5000)
        np.testing.assert_array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))
