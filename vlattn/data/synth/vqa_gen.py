"""VQA questions about a scene (colour, shape, count, existence, relation) with ten answers each.

Questions refer to objects by their shortest unique description ("the large circle"), so every
question has exactly one right answer. Ten simulated annotators give that answer, except that each
may (with probability ``noise``, at most three of them) give a plausible wrong answer, so the VQA
accuracy metric min(#matching / 3, 1) sees realistic disagreement while the majority stays right.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .grammar import pick, with_article
from .lexicon import COLOURS, GENERIC_WORDS, NUMBER_WORDS, RELATION_WORDS, SHAPES, SHAPE_WORDS, SIZES
from .relations import RELATIONS, relation_holds
from .scene import ATTRIBUTE_KEYS, Scene, SceneObject

ANSWERS_PER_QUESTION = 10
MAX_WRONG_ANSWERS = 3
QUESTIONS_PER_IMAGE = 5
MAX_COUNT = len(NUMBER_WORDS) - 1
ASKED_WORD = {"colour": "color", "shape": "shape"}  # questions use the VQA data's American spelling
# Attribute subsets that count and existence questions ask about.
QUERY_KEYS: tuple[tuple[str, ...], ...] = (("shape",), ("colour",), ("colour", "shape"), ("size", "shape"))


@dataclass(frozen=True)
class Question:
    """One question with its single correct answer; ``answer_type`` is "yes/no", "number" or "other"."""

    question: str
    answer: str
    answer_type: str
    question_type: str


def phrase(attrs: dict[str, str], plural: bool = False) -> str:
    """Canonical words in size-colour-shape order; "object(s)" when no shape is given."""
    words = [attrs[k] for k in ("size", "colour") if k in attrs]
    noun = SHAPE_WORDS[attrs["shape"]][0] if "shape" in attrs else GENERIC_WORDS[0]
    return " ".join(words + [noun[int(plural)]])


def matches(obj: SceneObject, attrs: dict[str, str]) -> bool:
    return all(obj.attributes[k] == v for k, v in attrs.items())


def unique_description(scene: Scene, obj: SceneObject, keys: tuple[str, ...] = ATTRIBUTE_KEYS) -> dict[str, str] | None:
    """The shortest attribute subset (over ``keys``) that only ``obj`` matches, or None."""
    for n in range(1, len(keys) + 1):
        for subset in itertools.combinations(keys, n):
            attrs = {k: obj.attributes[k] for k in subset}
            if sum(matches(o, attrs) for o in scene.objects) == 1:
                return attrs
    return None


def attribute_question(rng: np.random.Generator, scene: Scene, asked: str) -> Question | None:
    """"What color/shape is the <object>?" with the object named by its other attributes."""
    obj = pick(rng, scene.objects)
    attrs = unique_description(scene, obj, tuple(k for k in ATTRIBUTE_KEYS if k != asked))
    if attrs is None:
        return None
    question_type = f"what {ASKED_WORD[asked]} is the"
    return Question(f"{question_type.capitalize()} {phrase(attrs)}?", obj.attributes[asked], "other", question_type)


def _random_attributes(rng: np.random.Generator, scene: Scene) -> dict[str, str]:
    """Attributes of a present object (probability 1/2) or a random combination; keys vary."""
    keys = pick(rng, QUERY_KEYS)
    if rng.random() < 0.5:
        source = pick(rng, scene.objects).attributes
    else:
        source = {"shape": pick(rng, SHAPES), "colour": pick(rng, list(COLOURS)), "size": pick(rng, SIZES)}
    return {k: source[k] for k in keys}


def count_question(rng: np.random.Generator, scene: Scene) -> Question:
    attrs = _random_attributes(rng, scene) if rng.random() < 0.8 else {}
    n = sum(matches(o, attrs) for o in scene.objects)
    return Question(f"How many {phrase(attrs, plural=True)} are there?", str(n), "number", "how many")


def existence_question(rng: np.random.Generator, scene: Scene) -> Question:
    attrs = _random_attributes(rng, scene)
    present = any(matches(o, attrs) for o in scene.objects)
    return Question(f"Is there {with_article(phrase(attrs))}?", "yes" if present else "no", "yes/no", "is there a")


def relation_question(rng: np.random.Generator, scene: Scene) -> Question | None:
    if len(scene.objects) < 2:
        return None
    i, j = rng.choice(len(scene.objects), size=2, replace=False)
    a, b = scene.objects[int(i)], scene.objects[int(j)]
    attrs_a, attrs_b = unique_description(scene, a), unique_description(scene, b)
    if attrs_a is None or attrs_b is None:
        return None
    relation = pick(rng, list(RELATIONS))
    holds = relation_holds(relation, a.box, b.box, scene.next_to_gap)
    words = RELATION_WORDS[relation][0]
    text = f"Is the {phrase(attrs_a)} {words} the {phrase(attrs_b)}?"
    return Question(text, "yes" if holds else "no", "yes/no", "is the")


QUESTION_KINDS: dict[str, Callable[[np.random.Generator, Scene], Question | None]] = {
    "colour": functools.partial(attribute_question, asked="colour"),
    "shape": functools.partial(attribute_question, asked="shape"),
    "count": count_question,
    "existence": existence_question,
    "relation": relation_question,
}


def questions(scene: Scene, rng: np.random.Generator) -> list[Question]:
    """Up to five distinct questions: every kind once in random order, then counts and existence
    questions in place of kinds that do not apply to the scene."""
    kinds = [list(QUESTION_KINDS)[k] for k in rng.permutation(len(QUESTION_KINDS))]
    found: dict[str, Question] = {}
    for kind in kinds + ["count", "existence"] * QUESTIONS_PER_IMAGE:
        if len(found) == QUESTIONS_PER_IMAGE:
            break
        question = QUESTION_KINDS[kind](rng, scene)
        if question is not None:
            found.setdefault(question.question, question)
    return list(found.values())


def _wrong_answer(rng: np.random.Generator, question: Question) -> str:
    if question.answer_type == "yes/no":
        return "no" if question.answer == "yes" else "yes"
    if question.answer_type == "number":
        return str(min(max(int(question.answer) + pick(rng, (-1, 1)), 0), MAX_COUNT))
    pool = list(COLOURS) if question.answer in COLOURS else list(SHAPES)
    return pick(rng, [a for a in pool if a != question.answer])


def annotator_answers(question: Question, rng: np.random.Generator, noise: float) -> list[str]:
    """Ten answers: the right one, except for at most three plausible mistakes."""
    wrong = np.flatnonzero(rng.random(ANSWERS_PER_QUESTION) < noise)[:MAX_WRONG_ANSWERS]
    answers = [question.answer] * ANSWERS_PER_QUESTION
    for k in wrong:
        answers[int(k)] = _wrong_answer(rng, question)
    return answers
