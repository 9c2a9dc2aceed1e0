"""Official VQA accuracy: each normalisation rule and quirk, the 10-choose-9 average, per-type aggregates.

Expected values are worked out by hand from the rules of the official evaluation script.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from vlattn.errors import DataError
from vlattn.metrics.vqa import CONTRACTIONS, evaluate_vqa, normalize_answer, strip_punctuation, vqa_accuracy


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # a mark not next to a space is replaced by a space ...
        ("t-shirt", "t shirt"), ("black/white", "black white"), ("(left)", "left"), ("yes!", "yes"),
        # ... and deleted when the text has it next to a space
        ("red , white", "red white"), ("t-shirt - red", "tshirt red"), ("well-done !", "well done"),
        # digit-comma-digit anywhere: every mark is deleted, not spaced
        ("1,000", "1000"), ("1,000 t-shirts", "1000 tshirts"), ("a,b", "b"),
        # colon and apostrophe are not punctuation here
        ("10:30", "10:30"), ("it's", "it's"),
        # period: deleted unless a digit follows
        ("3.5", "3.5"), ("dog.", "dog"), ("st. louis", "st louis"), (".5", ".5"), ("mr.smith", "mrsmith"),
        # lower case, number words, articles
        ("Two", "2"), ("none", "0"), ("ten dogs", "10 dogs"), ("eleven", "eleven"), ("The Dog", "dog"),
        ("an apple", "apple"), ("a", ""),
        # contractions restored from apostrophe-less spellings, per the table's rule
        ("dont", "don't"), ("isnt", "isn't"), ("couldnt've", "couldn't've"), ("couldn'tve", "couldn't've"),
        ("couldntve", "couldntve"), ("twas", "'twas"), ("yall'll", "y'all'll"), ("y'allll", "y'all'll"),
        # bare spellings that are ordinary words stay; the table's quirks
        ("wed", "wed"), ("its", "its"), ("hell", "hell"), ("lets", "lets"), ("somebody'd", "somebodyd"),
        ("Im", "im"),
        # whitespace
        ("Yes\n", "yes"), ("\tred\tcar ", "red car"),
    ],
)  # fmt: skip
def test_normalisation_rules(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_period_rule_stops_after_32_periods() -> None:
    # The official script passes re.UNICODE (= 32) as the count of re.sub.
    assert strip_punctuation("." * 40) == "." * 8
    assert strip_punctuation("a." * 33) == "a" * 32 + "a."


def test_contraction_table_size_and_shape() -> None:
    # 73 one-apostrophe forms, 17 two-apostrophe forms x 2, 'ow's'at and y'all'd've x 3 each, 1 quirk
    assert len(CONTRACTIONS) == 73 + 17 * 2 + 3 + 3 + 1
    assert all(key == key.lower() for key in CONTRACTIONS)
    assert CONTRACTIONS["hed've"] == CONTRACTIONS["he'dve"] == "he'd've"
    assert "hedve" not in CONTRACTIONS and "shes" not in CONTRACTIONS


@pytest.mark.parametrize(
    ("prediction", "answers", "expected"),
    [
        # m humans match: the 10 leave-one-out subsets score min(1, (m - left_out_matched) / 3)
        ("yes", ["yes"] * 3 + ["no"] * 7, (3 * 2 / 3 + 7 * 1) / 10),  # 0.9
        ("yes", ["yes"] + ["no"] * 9, (1 * 0 + 9 * (1 / 3)) / 10),  # 0.3
        ("yes", ["yes"] * 2 + ["no"] * 8, (2 * (1 / 3) + 8 * (2 / 3)) / 10),  # 0.6
        ("yes", ["yes"] * 4 + ["no"] * 6, 1.0),  # every subset keeps >= 3 matches
        ("cat", ["dog"] * 10, 0.0),
        # answers differ -> both sides normalised: "Two" == "2"
        ("Two", ["2"] * 9 + ["3"], (9 * 1 + 1 * 1) / 10),
        ("the red one.", ["red 1"] * 2 + ["blue"] * 8, 0.6),
        # all humans identical -> compared after whitespace cleaning only
        ("2", ["two"] * 10, 0.0), ("yes", ["Yes"] * 10, 0.0), ("yes ", ["yes"] * 10, 1.0),
        # fewer than 10 answers: the same leave-one-out mean
        # answers differ -> "a" normalises to "", matching the two "a"s: (1/3 + 2/3 + 1/3) / 3
        ("a", ["a", "b", "a"], 4 / 9),
    ],
)  # fmt: skip
def test_accuracy_hand_worked(prediction: str, answers: list[str], expected: float) -> None:
    assert vqa_accuracy(prediction, answers) == pytest.approx(expected)


def test_accuracy_empty_article_prediction() -> None:
    # "a" and "the" both normalise to "" and match each other (answers differ, so both are normalised).
    assert vqa_accuracy("the", ["a", "a", "a", "b"]) == pytest.approx((3 * 2 / 3 + 1) / 4)


@dataclass
class Ann:
    answers: list[str]
    question_type: str
    answer_type: str


def test_evaluate_vqa_aggregates() -> None:
    annotations = {
        1: Ann(["yes"] * 10, "is the", "yes/no"),
        2: Ann(["no"] * 10, "is the", "yes/no"),
        3: Ann(["2"] * 2 + ["3"] * 8, "how many", "number"),
        4: Ann(["red"] * 10, "what color is the", "other"),
    }
    report = evaluate_vqa({1: "yes", 2: "yes", 3: "two", 4: "red"}, annotations)
    assert report.per_question == pytest.approx({1: 1.0, 2: 0.0, 3: 0.6, 4: 1.0})
    assert report.overall == pytest.approx(100 * 2.6 / 4)
    assert report.per_answer_type == pytest.approx({"number": 60.0, "other": 100.0, "yes/no": 50.0})
    assert report.per_question_type == pytest.approx({"how many": 60.0, "is the": 50.0, "what color is the": 100.0})
    summary = report.to_dict()
    assert summary["overall"] == 65.0 and summary["questions"] == 4
    one_third = evaluate_vqa({3: "3 "}, annotations)  # 8 match: every subset >= 7 -> 1.0
    assert one_third.overall == 100.0


def test_evaluate_vqa_rounding_like_official() -> None:
    annotations = {i: Ann(["x"] + ["y"] * 9, "what", "other") for i in range(3)}
    report = evaluate_vqa({0: "x", 1: "y", 2: "y"}, annotations)  # 0.3, 1, 1 -> 76.666..
    assert report.to_dict()["overall"] == 76.67 and report.to_dict(digits=None)["overall"] == pytest.approx(230 / 3)


def test_evaluate_vqa_unknown_question_named() -> None:
    with pytest.raises(DataError, match=r"have no annotation: \[5, 9\]"):
        evaluate_vqa({9: "yes", 5: "no"}, {1: Ann(["yes"], "is", "yes/no")})
