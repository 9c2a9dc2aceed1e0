"""ROUGE-L: hand-computed LCS and F-scores, and equality with pycocoevalcap."""

from __future__ import annotations

import random

import pytest
from metrics.corpora import assert_same_scores

from vlattn.metrics import Rouge
from vlattn.metrics.rouge import lcs_length


def test_lcs_hand_computed() -> None:
    assert lcs_length("a b c d".split(), "a c e d f".split()) == 3  # a c d
    assert lcs_length("a b a".split(), "b a b".split()) == 2
    assert lcs_length([], ["a"]) == 0


def test_rouge_l_hand_computed() -> None:
    # LCS 3, P = 3/4, R = 3/5 (best over references), beta = 1.2:
    # F = (1 + 1.44) * 0.75 * 0.6 / (0.6 + 1.44 * 0.75) = 1.098 / 1.68
    score, per_image = Rouge().compute_score({0: ["a c e d f", "x"]}, {0: ["a b c d"]})
    assert score == pytest.approx(1.098 / 1.68, rel=1e-12)
    assert per_image.tolist() == pytest.approx([1.098 / 1.68])


def test_lcs_matches_dynamic_programming() -> None:
    pytest.importorskip("pycocoevalcap")
    from pycocoevalcap.rouge.rouge import my_lcs

    rng = random.Random(0)
    for _ in range(500):
        a, b = (rng.choices("abcdef", k=rng.randint(0, 15)) for _ in range(2))
        assert lcs_length(a, b) == my_lcs(a, b)


def test_matches_pycocoevalcap(corpus: tuple[dict, dict]) -> None:
    rouge_mod = pytest.importorskip("pycocoevalcap.rouge.rouge")
    gts, res = corpus
    assert_same_scores(Rouge().compute_score(gts, res), rouge_mod.Rouge().compute_score(gts, res), rtol=1e-12)
