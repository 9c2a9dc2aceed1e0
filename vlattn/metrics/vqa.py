"""The official VQA accuracy: answer normalisation, the 10-choose-9 average, per-type breakdowns.

This module re-implements the rules of the VQA evaluation script (``vqaEval.py`` of the VQA API, the
version used for VQA v2 and by the evaluation server) so that numbers agree with it to the last digit.

**Normalisation** (:func:`normalize_answer`), applied in this order:

1. newlines and tabs become spaces, surrounding whitespace is stripped;
2. punctuation: each of ``; / [ ] " { } ( ) = + \\ _ - > < @ ` , ? !`` is *deleted* when the original text
   has that mark next to a space (``"red , white"``) or contains a digit-comma-digit group anywhere
   (``"1,000"``: then every mark is deleted), and is *replaced by a space* otherwise (``"t-shirt"`` ->
   ``"t shirt"``). Colons and apostrophes are kept;
3. a period not followed by a digit is deleted (``"3.5"`` keeps its period, ``"dog."`` loses it). The
   official call passes ``re.UNICODE`` (32) where the replacement *count* goes, so at most the first 32
   such periods are deleted; we reproduce that;
4. lower case, split on whitespace; number words ``none zero one .. ten`` become digits (``none`` -> ``0``);
   the articles ``a an the`` are dropped;
5. contractions written without apostrophes are restored (``dont`` -> ``don't``). The official table is
   reproduced by rule: a contraction with one apostrophe is restored from its spelling without it
   (``isnt``); one with two or more is restored from each spelling that lacks exactly one of them
   (``couldnt've`` and ``couldn'tve``, but not ``couldntve``). Contractions whose bare spelling is an
   ordinary word (``its``, ``wed``, ``hell``, ``shed``, ``lets``) are not in the table. Two quirks of the
   table are kept: ``somebody'd`` is rewritten to ``somebodyd``; its capitalised keys (``Im``, ``Ive``)
   can never match lower-cased text and so have no entry here;
6. the words are joined by single spaces.

**Accuracy** (:func:`vqa_accuracy`): a prediction is compared with the (normally ten) human answers,
after step 1 only when all human answers are identical (an official quirk: ``"2"`` scores 0 against ten
``"two"``), after full normalisation of both sides otherwise. For each human answer left out in turn, the
score is min(1, number of the *other* human answers equal to the prediction / 3); the accuracy is the mean
of these scores. Human answers are told apart by position (VQA v2 answer ids are unique).

**Aggregates** (:func:`evaluate_vqa`): overall, per answer type (``yes/no``, ``number``, ``other``) and per
question type (``"what color is the"``, ...) are plain means of the per-question accuracies, reported in
percent; the official script rounds them to two decimals (``VQAReport.to_dict(digits=2)``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Protocol, Sequence

from vlattn.errors import DataError

_PUNCTUATION = tuple(';/[]"{}()=+\\_-><@`,?!')
_DIGIT_COMMA_DIGIT = re.compile(r"\d,\d")
_PERIOD = re.compile(r"\.(?!\d)")
_MAX_PERIODS = 32  # re.UNICODE passed as the count argument of re.sub in the official script
_NUMBERS = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
            "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10"}  # fmt: skip
_ARTICLES = frozenset({"a", "an", "the"})
# Contractions the official table restores from apostrophe-less spellings (see step 5 above).
_CONTRACTIONS = """
ain't aren't can't could've couldn't couldn't've didn't doesn't don't hadn't hadn't've hasn't haven't he'd
he'd've he's how'd how'll how's isn't it'd it'd've it'll ma'am mightn't mightn't've might've mustn't
must've needn't not've o'clock oughtn't 'ow's'at shan't she'd've should've shouldn't shouldn't've
somebody'd've somebody'll somebody's someone'd someone'd've someone'll someone's something'd
something'd've something'll that's there'd there'd've there're there's they'd they'd've they'll they're
they've 'twas wasn't we'd've we've weren't what'll what're what's what've when's where'd where's where've
who'd who'd've who'll who's who've why'll why're why's won't would've wouldn't wouldn't've y'all y'all'll
y'all'd've you'd you'd've you'll you're you've
""".split()
_TABLE_QUIRKS = {"somebody'd": "somebodyd"}


def _misspellings(word: str) -> Iterable[str]:
    """The apostrophe-less spellings of ``word`` that the official table maps back to it."""
    cuts = [i for i, char in enumerate(word) if char == "'"]
    if len(cuts) == 1:
        yield word.replace("'", "")
        return
    for cut in cuts:
        yield word[:cut] + word[cut + 1 :]


CONTRACTIONS: dict[str, str] = {
    **{spelling: word for word in _CONTRACTIONS for spelling in _misspellings(word)},
    **_TABLE_QUIRKS,
}


def clean(text: str) -> str:
    """Step 1: newlines/tabs to spaces, surrounding whitespace stripped."""
    return text.replace("\n", " ").replace("\t", " ").strip()


def strip_punctuation(text: str) -> str:
    """Steps 2-3: the punctuation and period rules (decisions look at the text as given)."""
    delete_all = _DIGIT_COMMA_DIGIT.search(text) is not None
    out = text
    for mark in _PUNCTUATION:
        delete = delete_all or f"{mark} " in text or f" {mark}" in text
        out = out.replace(mark, "" if delete else " ")
    return _PERIOD.sub("", out, count=_MAX_PERIODS)


def digits_articles_contractions(text: str) -> str:
    """Steps 4-6: lower case, number words to digits, articles dropped, contractions restored."""
    words = (_NUMBERS.get(word, word) for word in text.lower().split())
    return " ".join(CONTRACTIONS.get(word, word) for word in words if word not in _ARTICLES)


def normalize_answer(answer: str) -> str:
    """An answer normalised as the official VQA evaluation does (``"Two dogs!"`` -> ``"2 dogs"``)."""
    return digits_articles_contractions(strip_punctuation(clean(answer)))


def vqa_accuracy(prediction: str, answers: Sequence[str]) -> float:
    """Official accuracy in [0, 1] of ``prediction`` against the human ``answers`` (normally 10).

    Mean over each human answer left out of min(1, #matching among the others / 3); see the module notes
    for when answers are normalised.
    """
    if not answers:
        raise DataError("no human answers to score against")
    prediction = clean(prediction)
    humans = [clean(answer) for answer in answers]
    if len(set(humans)) > 1:
        prediction = normalize_answer(prediction)
        humans = [normalize_answer(answer) for answer in humans]
    matches = sum(answer == prediction for answer in humans)
    return sum(min(1.0, (matches - (answer == prediction)) / 3) for answer in humans) / len(humans)


class AnnotatedQuestion(Protocol):
    """What scoring needs of one annotation (``vlattn.data.vqa.Annotation`` has it)."""

    answers: list[str]
    question_type: str
    answer_type: str


def _percent_means(groups: Mapping[str, list[float]]) -> dict[str, float]:
    return {key: 100.0 * sum(values) / len(values) for key, values in sorted(groups.items())}


@dataclass
class VQAReport:
    """Accuracies in percent: ``overall``, ``per_answer_type``, ``per_question_type``; ``per_question``
    maps each question id to its accuracy in [0, 1]."""

    overall: float
    per_answer_type: dict[str, float]
    per_question_type: dict[str, float]
    per_question: dict[int, float] = field(repr=False)

    @property
    def questions(self) -> int:
        """Number of questions scored."""
        return len(self.per_question)

    def to_dict(self, digits: int | None = 2) -> dict[str, object]:
        """JSON-ready summary; ``digits=2`` rounds as the official script does (None: full precision)."""

        def r(value: float) -> float:
            return value if digits is None else round(value, digits)

        return {
            "questions": self.questions,
            "overall": r(self.overall),
            "perAnswerType": {k: r(v) for k, v in self.per_answer_type.items()},
            "perQuestionType": {k: r(v) for k, v in self.per_question_type.items()},
        }


def evaluate_vqa(predictions: Mapping[int, str], annotations: Mapping[int, AnnotatedQuestion]) -> VQAReport:
    """Score ``{question_id: answer}`` against the annotations of those questions. Accuracies are summed in the
    order of ``annotations`` (the annotation file's), whatever the order of ``predictions``, as the official
    ``vqaEval.py`` does.

    Every predicted question must have an annotation (a :class:`DataError` names the first unknown ids);
    questions without a prediction are not scored (file-level coverage checks live with the file readers).
    """
    if not predictions:
        raise DataError("no predictions to score")
    unknown = [qid for qid in predictions if qid not in annotations]
    if unknown:
        raise DataError(f"{len(unknown)} predicted question ids have no annotation: {sorted(unknown)[:10]}")
    per_question: dict[int, float] = {}
    by_answer: dict[str, list[float]] = defaultdict(list)
    by_question: dict[str, list[float]] = defaultdict(list)
    for qid, annotation in annotations.items():  # the annotations' order, as the official script sums: a float
        if qid not in predictions:  # sum depends on its order, and so the rounded figure at an exact .xx5
            continue
        accuracy = vqa_accuracy(predictions[qid], annotation.answers)
        per_question[qid] = accuracy
        by_answer[annotation.answer_type].append(accuracy)
        by_question[annotation.question_type].append(accuracy)
    overall = 100.0 * sum(per_question.values()) / len(per_question)
    return VQAReport(overall, _percent_means(by_answer), _percent_means(by_question), per_question)


__all__ = [
    "CONTRACTIONS", "VQAReport", "clean", "digits_articles_contractions", "evaluate_vqa", "normalize_answer",
    "strip_punctuation", "vqa_accuracy",
]
