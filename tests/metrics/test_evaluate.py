"""evaluate_captions, collapse_repeats and the best constant caption."""

from __future__ import annotations

import pytest

from vlattn.errors import DataError
from vlattn.metrics import CiderD, best_constant_caption, evaluate_captions
from vlattn.metrics.evaluate import collapse_repeated_words

GTS = {1: ["A man riding a horse.", "A person on a horse!"], 2: ["Two dogs play in the grass.", "Dogs playing."],
       3: ["A red bus on the street."]}
RES = {1: "a man on a a horse", 2: "a dog dog in grass", 3: "a bus bus"}


def test_collapse_repeated_words() -> None:
    assert collapse_repeated_words("a dog dog dog runs a a") == "a dog runs a"


def test_scores_and_collapse_repeats() -> None:
    plain = evaluate_captions(GTS, RES, tokenizer_backend="python", metrics=("BLEU", "ROUGE_L", "CIDEr"))
    collapsed = evaluate_captions(GTS, RES, tokenizer_backend="python", metrics=("CIDEr",), collapse_repeats=True)
    assert set(plain.scores) == {"Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "ROUGE_L", "CIDEr"}
    gts = {1: ["a man riding a horse", "a person on a horse"], 2: ["two dogs play in the grass", "dogs playing"],
           3: ["a red bus on the street"]}
    res = {1: ["a man on a horse"], 2: ["a dog in grass"], 3: ["a bus"]}
    assert collapsed.scores["CIDEr"] == pytest.approx(float(CiderD().compute_score(gts, res)[0]), rel=1e-12)
    assert collapsed.scores["CIDEr"] != plain.scores["CIDEr"]
    assert plain.to_dict() == {"scores": plain.scores, "unavailable": {}, "tokenizer": plain.tokenizer}
    assert plain.tokenizer["backend"] == "python" and plain.tokenizer["captions_that_may_differ"] == 0


def test_report_counts_captions_where_python_may_differ_from_java() -> None:
    gts = {**GTS, 4: ["ΣΑΣ ΚΑΛΟΣ"]}
    report = evaluate_captions(gts, {**RES, 4: "a sign"}, tokenizer_backend="python", metrics=("CIDEr",))
    assert report.tokenizer["captions_that_may_differ"] == 1
    assert "sigma" in report.tokenizer["differences"]


def test_unavailable_metrics_have_reasons() -> None:
    report = evaluate_captions(GTS, RES, tokenizer_backend="python", metrics=("SPICE",))
    assert ("SPICE" in report.scores) != ("SPICE" in report.unavailable)
    assert all(reason for reason in report.unavailable.values())


def test_bad_input() -> None:
    with pytest.raises(DataError, match="without a prediction"):
        evaluate_captions(GTS, {1: "a"}, tokenizer_backend="python", metrics=("CIDEr",))
    with pytest.raises(ValueError, match="valid"):
        evaluate_captions(GTS, RES, metrics=("WER",))


def test_best_constant_caption() -> None:
    caption, score = best_constant_caption(GTS, tokenizer_backend="python")
    gts = {i: [" ".join(c.lower().strip(".!").split()) for c in caps] for i, caps in GTS.items()}
    by_hand = {c: float(CiderD().compute_score(gts, {i: [c] for i in gts})[0]) for caps in gts.values() for c in caps}
    assert score == pytest.approx(max(by_hand.values()), rel=1e-12) and by_hand[caption] == pytest.approx(score)
    assert best_constant_caption(GTS, ["A horse.", "a dog"], tokenizer_backend="python")[0] in {"a horse", "a dog"}
