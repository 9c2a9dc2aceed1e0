"""The shared n-gram code: encoding, counting and the key sort."""

from __future__ import annotations

from collections import Counter

import numpy as np

from vlattn.metrics.ngrams import count_ngrams, encode, sort_by_key


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


def test_sort_by_key_is_a_stable_sort_in_both_regimes() -> None:
    # Keys below 2**40 with 13-bit positions fit one packed np.sort; keys near 2**60 take the radix fallback.
    rng = np.random.default_rng(0)
    for high in (3, 2**16, 2**40, 2**60):
        keys = rng.integers(0, high, 5000)
        positions = np.sort(rng.choice(8000, 5000, replace=False))
        order = np.argsort(keys, kind="stable")
        sorted_keys, sorted_positions = sort_by_key(keys, positions, 8000)
        np.testing.assert_array_equal(sorted_keys, keys[order])
        np.testing.assert_array_equal(sorted_positions, positions[order])


def test_count_ngrams_matches_counters() -> None:
    rng = np.random.default_rng(1)
    sentences = [[f"w{i}" for i in rng.integers(0, 6, rng.integers(0, 9))] for _ in range(60)]
    vocab: dict[str, int] = {}
    encoded = encode(sentences, vocab)
    words = list(vocab)
    base = encoded.base
    decoded: list[tuple[str, ...]] = []  # the n-gram of each id, from its key: prefix id * base + last word id
    for k, order in enumerate(count_ngrams(encoded, 4), start=1):
        assert np.all(np.diff(order.keys) > 0)
        if k == 1:
            decoded = [(words[key],) for key in order.keys.tolist()]
        else:
            decoded = [decoded[key // base] + (words[key % base],) for key in order.keys.tolist()]
        got = {(decoded[g], s): c for g, s, c in zip(order.ngram.tolist(), order.sentence.tolist(), order.count.tolist())}
        expected = Counter(
            (tuple(sent[i : i + k]), s) for s, sent in enumerate(sentences) for i in range(len(sent) - k + 1)
        )
        assert got == dict(expected) and len(order.ngram) == len(expected)
        assert list(zip(order.ngram, order.sentence)) == sorted(zip(order.ngram, order.sentence))
