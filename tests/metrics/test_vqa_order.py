"""VQA accuracy sums the per-question accuracies in the order of the annotations, as the official evaluation
(``vqaEval.py``: ``for quesId in quesIds``, the ground truth's question ids; ``round(100*float(sum(accQA))/
len(accQA), 2)``) does, whatever the order of the results file. Floating-point sums depend on their order: at an
exact .xx5 the rounded figure does too."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from vlattn.metrics.vqa import evaluate_vqa

# Two orders of the same 80 per-question accuracies (0 / 0.3 / 0.6 / 0.9 / 1: "0", "3", "6", "9", "X"; 0-4 of the
# 10 humans gave the predicted answer), whose exact mean is 60.875 %. Summed in float in order A it rounds to
# 60.88, in order B to 60.87.
ORDER_A = "3X0006X93696XXX9969X9090X63066963390X36609X390X09X66XX3X00630XX9336XXX6XX906066X"
ORDER_B = "30699X666XX6330X0XX0X0X60690369XX6636099X09X00X309X9X99X66XX66300X966633X3X093X9"
MATCHES = {"0": 0, "3": 1, "6": 2, "9": 3, "X": 4}


@dataclass
class Annotation:
    answers: list[str]
    question_type: str = "what is"
    answer_type: str = "other"


def annotations(order: str, first_id: int = 0) -> dict[int, Annotation]:
    """Questions ``first_id``... whose humans answered "yes" as often as ``order`` says (the rest "no")."""
    return {first_id + i: Annotation(["yes"] * MATCHES[c] + ["no"] * (10 - MATCHES[c])) for i, c in enumerate(order)}


def official_overall(truth: dict[int, Annotation], predictions: dict[int, str]) -> float:
    """vqaEval.py's overall accuracy: per question the mean over the 10 leave-one-out subsets of min(1, matches/3),
    accumulated in the ground truth's question order, then round(100 * sum / n, 2)."""
    accuracies = []
    for qid, annotation in truth.items():
        subsets = [min(1, sum(a == predictions[qid] for j, a in enumerate(annotation.answers) if j != i) / 3)
                   for i in range(len(annotation.answers))]
        accuracies.append(float(sum(subsets)) / len(subsets))
    return round(100 * float(sum(accuracies)) / len(accuracies), 2)


def test_the_constructed_orders_round_apart() -> None:
    values = [Fraction(min(3, MATCHES[c]) * 3, 10) + (Fraction(1, 10) if MATCHES[c] == 4 else 0) for c in ORDER_A]
    assert sorted(ORDER_A) == sorted(ORDER_B) and 100 * sum(values) / len(values) == Fraction(60875, 1000)
    yes = {qid: "yes" for qid in range(80)}
    assert official_overall(annotations(ORDER_A), yes) == 60.88 and official_overall(annotations(ORDER_B), yes) == 60.87


def test_results_file_order_does_not_change_the_figure() -> None:
    """The annotations in order A; the results file lists the questions in the order that would put the
    accuracies in order B (and reversed): the figure is the official one, 60.88, for every order."""
    truth = annotations(ORDER_A)
    by_accuracy: dict[str, list[int]] = {}
    for qid, c in enumerate(ORDER_A):
        by_accuracy.setdefault(c, []).append(qid)
    as_b = [by_accuracy[c].pop() for c in ORDER_B]
    for ids in (as_b, list(reversed(as_b)), sorted(truth)):
        report = evaluate_vqa({qid: "yes" for qid in ids}, truth)
        assert report.to_dict()["overall"] == official_overall(truth, {qid: "yes" for qid in ids}) == 60.88
        assert report.to_dict()["perAnswerType"]["other"] == 60.88
        assert report.to_dict()["perQuestionType"]["what is"] == 60.88
