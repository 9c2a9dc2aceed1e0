"""CIDEr-D: a hand-computed case and equality with pycocoevalcap's Cider (which is CIDEr-D)."""

from __future__ import annotations

import math

import pytest
from metrics.corpora import CAPTIONS, assert_same_scores, unusual_corpus

from vlattn.metrics import CiderD, PTBTokenizer


def test_hand_computed() -> None:
    # N = 2 images; every n-gram occurs in one image's references, so idf = log 2 =: L for all of them.
    # Image 0: "a b" vs "a b": cosine 1 for orders 1 and 2, 0 for 3 and 4 (no n-grams), no length
    #   penalty -> 10 * (1 + 1 + 0 + 0) / 4 = 5.
    # Image 1: "c" vs "c d": order 1 cosine L^2 / (L * sqrt(2) L) = 1/sqrt(2); bigram counts 0 vs 1 ->
    #   penalty exp(-1 / (2 * 6^2)) -> 10 * (1/sqrt(2)) * exp(-1/72) / 4.
    score, per_image = CiderD().compute_score({0: ["a b"], 1: ["c d"]}, {0: ["a b"], 1: ["c"]})
    image_1 = 10 * math.exp(-1 / 72) / math.sqrt(2) / 4
    assert per_image.tolist() == pytest.approx([5.0, image_1], rel=1e-12)
    assert score == pytest.approx((5.0 + image_1) / 2, rel=1e-12)


def test_single_image_scores_zero() -> None:
    # idf = log(1) - log(1) = 0 for every reference n-gram.
    assert CiderD().compute_score({0: ["a b c"]}, {0: ["a b c"]})[0] == 0.0


def test_matches_pycocoevalcap_random(corpus: tuple[dict, dict]) -> None:
    cider_mod = pytest.importorskip("pycocoevalcap.cider.cider")
    gts, res = corpus
    ours = CiderD().compute_score(gts, res)
    assert_same_scores(ours, cider_mod.Cider().compute_score(gts, res))
    assert ours[1].shape == (len(gts),)


def test_matches_pycocoevalcap_on_captions() -> None:
    cider_mod = pytest.importorskip("pycocoevalcap.cider.cider")
    tokens = PTBTokenizer("python").tokenize({0: CAPTIONS})[0]
    gts = {i: [tokens[(i + j) % len(tokens)] for j in range(1, 1 + i % 5 + 1)] for i in range(len(tokens))}
    res = {i: [tokens[i]] for i in range(len(tokens))}
    assert_same_scores(CiderD().compute_score(gts, res), cider_mod.Cider().compute_score(gts, res))


def test_nul_and_unusual_characters_match_pycocoevalcap() -> None:
    cider_mod = pytest.importorskip("pycocoevalcap.cider.cider")
    gts, res = unusual_corpus()
    assert_same_scores(CiderD().compute_score(gts, res), cider_mod.Cider().compute_score(gts, res))
