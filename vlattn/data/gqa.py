"""GQA (Hudson and Manning 2019) balanced question files read as VQA splits, so that the VQA task's data,
training and evaluation serve GQA (``data.format: gqa``).

A file ``<split>_balanced_questions.json`` maps each question id to ``{"imageId", "question", "answer",
"types": {"structural", "semantic", "detailed"}, ...}`` (``answer`` absent in the test files). Each record
becomes a :class:`~vlattn.data.vqa.Question` and, with an answer, an :class:`~vlattn.data.vqa.Annotation` whose
ten "human" answers are all GQA's one answer, whose ``answer_type`` is the structural type (verify, query,
choose, logical, compare) and whose ``question_type`` the semantic type (rel, attr, obj, cat, global). VQA's
accuracy of such a question is 1 exactly when the prediction equals the answer after VQA's answer normalisation
(:func:`vlattn.metrics.vqa.normalize_answer`), and its per-answer-type and per-question-type tables are GQA's
per-type breakdown. GQA's own evaluation compares the strings unnormalised; the two agree whenever normalisation
merges no two answers of the candidate set, which :func:`check_answers_distinct` checks.

Ids: question and image ids must be decimal (the Visual Genome images of train, val and testdev-balanced; the
``n``-prefixed ids of GQA's test images are refused, naming the question) and are read as integers; the
question ids' original strings (GQA's are zero-padded) are kept for the predictions file.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from vlattn.data.jsonfiles import read_json
from vlattn.data.vqa import Annotation, Question, VQASplit
from vlattn.errors import DataError
from vlattn.metrics.vqa import normalize_answer

HUMANS = 10


def _decimal(value: object, what: str, path: Path, item: str) -> int:
    if not isinstance(value, str) or not value.isdecimal():
        raise DataError(f"{what} {value!r} is not a decimal id", path=path, item=item)
    return int(value)


def load_gqa_file(path: Path) -> tuple[list[Question], dict[int, Annotation], dict[int, str]]:
    """Questions, annotations (of the records with an answer) and original question ids of one file."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise DataError("expected a JSON object of question id -> question", path=path)
    questions, annotations, ids = [], {}, {}
    for key, record in data.items():
        item = f"question {key}"
        qid = _decimal(key, "question id", path, item)
        if not isinstance(record, dict) or not isinstance(record.get("question"), str):
            raise DataError("expected an object with a question", path=path, item=item)
        image = _decimal(record.get("imageId"), "imageId", path, item)
        questions.append(Question(qid, image, record["question"]))
        ids[qid] = key
        if "answer" in record:
            types = record.get("types") or {}
            answer = str(record["answer"])
            annotations[qid] = Annotation(qid, image, str(types.get("semantic", "")), str(types.get("structural", "")),
                                          answer, [answer] * HUMANS)
    return questions, annotations, ids


def check_answers_distinct(answers: Iterable[str], path: Path) -> None:
    """Refuse answers that VQA's normalisation would merge (the accuracy would then differ from GQA's)."""
    seen: dict[str, str] = {}
    for answer in answers:
        other = seen.setdefault(normalize_answer(answer), answer)
        if other != answer:
            raise DataError(f"answers {other!r} and {answer!r} normalise alike; GQA's exact match would tell them "
                            "apart", path=path)


def load_gqa_split(name: str, files: Sequence[Path]) -> VQASplit:
    """The questions of ``files`` as a VQA split (annotations None when no record has an answer)."""
    questions: list[Question] = []
    annotations: dict[int, Annotation] = {}
    ids: dict[int, str] = {}
    for path in files:
        found, answered, originals = load_gqa_file(path)
        for question in found:
            if question.question_id in ids:
                raise DataError("question id appears twice", path=path, item=f"question {question.question_id}")
        questions += found
        annotations.update(answered)
        ids.update(originals)
        check_answers_distinct({a.multiple_choice_answer for a in annotations.values()}, path)
    return VQASplit(name, questions, annotations or None, list(files), ids)
