"""BLEU: hand-computed cases and equality with pycocoevalcap."""

from __future__ import annotations

import math

import pytest
from metrics.corpora import assert_same_scores, unusual_corpus

from vlattn.metrics import Bleu


def test_brevity_penalty_hand_computed() -> None:
    # Candidate 3 words, reference 6: precisions 3/3, 2/2, 1/1, 0/0 (-> 1e-15/1e-9 = 1e-6 by the COCO
    # smoothing); brevity penalty exp(1 - 6/3) = e^-1.
    corpus, per_image = Bleu(4).compute_score({0: ["the cat sat on the mat"]}, {0: ["the cat sat"]})
    expected = [math.exp(-1)] * 3 + [math.exp(-1) * 1e-6**0.25]
    assert corpus == pytest.approx(expected, rel=1e-8)
    assert [s[0] for s in per_image] == pytest.approx(expected, rel=1e-8)


def test_clipping_and_closest_reference_length() -> None:
    # "the" is clipped to its maximum reference count 1 -> P1 = 1/3; closest reference length to 3 among
    # {2, 4} is the shorter, 2, so there is no brevity penalty.
    corpus, _ = Bleu(1).compute_score({0: ["the cat", "a cat on it"]}, {0: ["the the the"]})
    assert corpus[0] == pytest.approx(1 / 3, rel=1e-8)
    # Lengths {4, 6}: closest is 4 -> penalty exp(1 - 4/3); shortest is the same; average 5 -> exp(1 - 5/3).
    gts, res = {0: ["x y z w", "x y z w v u"]}, {0: ["x y z"]}
    assert Bleu(1).compute_score(gts, res)[0][0] == pytest.approx(math.exp(1 - 4 / 3), rel=1e-8)
    assert Bleu(1, "average").compute_score(gts, res)[0][0] == pytest.approx(math.exp(1 - 5 / 3), rel=1e-8)


def test_layout_errors() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Bleu().compute_score({0: ["a"]}, {0: ["a", "b"]})
    with pytest.raises(ValueError, match="same image ids"):
        Bleu().compute_score({0: ["a"]}, {1: ["a"]})


@pytest.mark.parametrize("option", ["closest", "shortest", "average"])
def test_matches_pycocoevalcap(corpus: tuple[dict, dict], option: str) -> None:
    scorer_mod = pytest.importorskip("pycocoevalcap.bleu.bleu_scorer")
    gts, res = corpus
    reference = scorer_mod.BleuScorer(n=4)
    for key in gts:
        reference += (res[key][0], gts[key])
    expected = reference.compute_score(option=option, verbose=0)
    ours = Bleu(4, option).compute_score(gts, res)
    assert_same_scores(ours, expected)


def test_nul_and_unusual_characters_match_pycocoevalcap() -> None:
    bleu_mod = pytest.importorskip("pycocoevalcap.bleu.bleu")
    gts, res = unusual_corpus()
    assert_same_scores(Bleu(4).compute_score(gts, res), bleu_mod.Bleu(4).compute_score(gts, res, verbose=0))
