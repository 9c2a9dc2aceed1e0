"""Score a VQA results file with the official accuracy (:mod:`vlattn.metrics.vqa`).

Results: ``[{"question_id": int, "answer": str}, ...]``, the VQA evaluation server's format (the server
names files ``vqa_OpenEnded_mscoco_<split>_<alg>_results.json``). As the official ``VQA.loadRes`` requires,
the results must answer every question of the annotation file, once each: duplicates, unknown question ids
and unanswered questions are refused with the ids named. With a questions file, every annotated question
must be in it with the same image id.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from vlattn.data.jsonfiles import write_json
from vlattn.data.vqa import Annotation, load_annotations, load_questions
from vlattn.errors import DataError
from vlattn.metrics.vqa import VQAReport, evaluate_vqa, normalize_answer
from vlattn.scoring.ids import check_result_ids, read_results


def load_vqa_results(path: str | Path) -> dict[int, str]:
    """``{question_id: answer}`` of a VQA results file; duplicate ids are refused (naming them)."""
    return read_results(path, "question_id", "answer", "question")


def write_vqa_results(path: str | Path, answers: Mapping[int, str]) -> None:
    """Write ``[{"question_id", "answer"}]`` (sorted by question id) atomically."""
    write_json(path, [{"question_id": int(qid), "answer": str(answer)} for qid, answer in sorted(answers.items())])


def _check_questions(annotations: Mapping[int, Annotation], questions: str | Path) -> None:
    asked = {q.question_id: q.image_id for q in load_questions(questions)}
    for qid, annotation in annotations.items():
        if qid not in asked:
            raise DataError("annotated question is not in the questions file", path=questions, item=f"question {qid}")
        if asked[qid] != annotation.image_id:
            raise DataError(f"image {asked[qid]} here but {annotation.image_id} in the annotations", path=questions,
                            item=f"question {qid}")


@dataclass
class VQAScore:
    """A scored VQA results file."""

    results: str
    annotations: str
    report: VQAReport
    predictions: dict[int, str]
    truth: dict[int, Annotation]

    def to_dict(self) -> dict[str, Any]:
        return {"task": "vqa", "results": self.results, "annotations": self.annotations, **self.report.to_dict()}

    def per_image(self) -> list[dict[str, Any]]:
        """One row per question: answer as given and normalised, accuracy in [0, 1], its types."""
        return [
            {"question_id": qid, "image_id": self.truth[qid].image_id, "answer": answer,
             "normalized": normalize_answer(answer), "accuracy": self.report.per_question[qid],
             "answer_type": self.truth[qid].answer_type, "question_type": self.truth[qid].question_type}
            for qid, answer in sorted(self.predictions.items())
        ]


def score_vqa_files(results: str | Path, annotations: str | Path, questions: str | Path | None = None) -> VQAScore:
    """Score the results file against the annotations (and check the questions file when given)."""
    predictions = load_vqa_results(results)
    truth = load_annotations(annotations)
    if questions is not None:
        _check_questions(truth, questions)
    check_result_ids(list(predictions), truth, kind="question", path=results, reference=annotations, required=truth)
    return VQAScore(str(results), str(annotations), evaluate_vqa(predictions, truth), predictions, truth)
