"""Word ids from UTF-8 bytes agree with ``str.split()`` plus a dict, whatever the characters or the hash does."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest

from vlattn.metrics import words
from vlattn.metrics.words import word_ids

TRICKY = [
    "", "   ", "a", "a\x00", "a\x00b", "\x00", "ab", "a b", " lead and trail ",
    "tab\tnew\nline\rform\x0cvt\x0bfs\x1cgs\x1drs\x1eus\x1f end",
    "nbsp\xa0nel\x85ogham\u1680em\u2003ls\u2028ps\u2029nnbsp\u202fmath\u205fideo\u3000end",
    "zero\u200bwidth is not a space", "café naïve Æsop", "emoji 🐶🐱 dog", "中文 字 中文",
    "exactly8 exactly8x 16bytes16bytes 16bytes16bytesX " + "long" * 30,
    "lone \ud800 surrogate", "a\x00\x00 a\x00 a",
]


def reference(strings: list[str], vocab: dict[str, int]) -> tuple[list[int], list[int]]:
    """``str.split()`` each string and look every token up in ``vocab`` (adding unseen ones)."""
    tokens = [s.split() for s in strings]
    return [vocab.setdefault(t, len(vocab)) for ts in tokens for t in ts], [len(ts) for ts in tokens]


def check(strings: list[str], vocab: dict[str, int] | None = None) -> None:
    expected_vocab = dict(vocab or {})
    got_vocab = dict(vocab or {})
    expected_ids, expected_lengths = reference(strings, expected_vocab)
    ids, lengths = word_ids(strings, got_vocab)
    assert ids.tolist() == expected_ids
    assert lengths.tolist() == expected_lengths
    assert list(got_vocab.items()) == list(expected_vocab.items())  # same ids, same insertion order


def test_tricky_characters_split_like_str_split() -> None:
    check(TRICKY)
    check(TRICKY[::-1], {"a": 0, "end": 1, "\x00": 2})


def test_random_strings_over_a_small_alphabet() -> None:
    rng = random.Random(0)
    alphabet = ["a", "b", "\x00", " ", " ", "\t", "é", "\u3000", "x" * 7, "y" * 9]
    strings = ["".join(rng.choices(alphabet, k=rng.randint(0, 30))) for _ in range(300)]
    check(strings)


def test_every_hash_colliding_still_separates_words(monkeypatch: pytest.MonkeyPatch) -> None:
    # With a zero multiplier every token hashes to 0: the byte comparison alone must tell the words apart.
    monkeypatch.setattr(words, "_MIX", np.uint64(0))
    check(TRICKY)
    check(["w1 w2 w1 w3 w2", "w3 w4 w1w", "w1"])


def test_whitespace_table_is_complete() -> None:
    every = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}
    assert every == set(words._WHITESPACE)
