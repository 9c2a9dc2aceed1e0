"""VQA files: VQA v2 layout, ten answers per question, answers true of the scene."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from synth_claims import matching, noun_phrases

from vlattn.data.synth.lexicon import RELATION_WORDS
from vlattn.data.synth.relations import relation_holds
from vlattn.data.vqa import load_annotations, load_questions, vqa_accuracy

RELATIONS = {words[0]: name for name, words in RELATION_WORDS.items()}
ANSWER_TYPES = {"how many": "number", "is there a": "yes/no", "is the": "yes/no"}
RELATION = re.compile(rf"is the (.+?) ({'|'.join(RELATIONS)}) the (.+)\?")


def _attrs(text: str) -> dict[str, str]:
    (phrase,) = noun_phrases(text.split())
    return phrase.attrs


def _the(objects: list[dict], text: str) -> dict:
    (index,) = matching(objects, _attrs(text))  # a question names exactly one object
    return objects[index]


def expected_answer(question: str, scene: dict, gap: float) -> str:
    """The answer computed from the scene for each question pattern the generator uses."""
    q, objects = question.lower(), scene["objects"]
    if m := re.fullmatch(r"what color is the (.+)\?", q):
        return _the(objects, m[1])["colour"]
    if m := re.fullmatch(r"what shape is the (.+)\?", q):
        return _the(objects, m[1])["shape"]
    if m := re.fullmatch(r"how many (.+) are there\?", q):
        return str(len(matching(objects, _attrs(m[1]))))
    if m := re.fullmatch(r"is there an? (.+)\?", q):
        return "yes" if matching(objects, _attrs(m[1])) else "no"
    m = RELATION.fullmatch(q)
    assert m, f"unknown question pattern {question!r}"
    a, b = _the(objects, m[1]), _the(objects, m[3])
    return "yes" if relation_holds(RELATIONS[m[2]], a["box"], b["box"], gap) else "no"


def test_vqa_files_answers_match_scenes(synth_dir: Path, scenes: dict[int, dict], next_to_gap: float) -> None:
    kinds: Counter[str] = Counter()
    for split in ("train", "val", "test"):
        questions = load_questions(synth_dir / "vqa" / f"questions_{split}.json")
        annotations = load_annotations(synth_dir / "vqa" / f"annotations_{split}.json")
        assert {q.question_id for q in questions} == set(annotations) and questions
        for q in questions:
            a = annotations[q.question_id]
            assert scenes[q.image_id]["split"] == split and a.image_id == q.image_id
            assert a.multiple_choice_answer == expected_answer(q.question, scenes[q.image_id], next_to_gap), q.question
            assert len(a.answers) == 10 and Counter(a.answers).most_common(1)[0][0] == a.multiple_choice_answer
            assert vqa_accuracy(a.multiple_choice_answer, a.answers) == 1.0
            kinds[a.question_type] += 1
            assert a.answer_type == ANSWER_TYPES.get(a.question_type, "other")
    assert set(kinds) == {"what color is the", "what shape is the", "how many", "is there a", "is the"}


def test_yes_no_answers_are_balanced(synth_dir: Path) -> None:
    answers = [a.multiple_choice_answer for a in load_annotations(synth_dir / "vqa" / "annotations_train.json").values()
               if a.answer_type == "yes/no"]
    assert 0.3 < answers.count("yes") / len(answers) < 0.7
