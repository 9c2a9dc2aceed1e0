"""The synthetic set in the formats of two more LXMERT tasks: GQA (balanced question files) and NLVR2 (statements
about two images), and the WordPiece ``vocab.txt`` of its language.

- GQA: every VQA question of an image, with its single correct answer and GQA's two question types: structural
  (``verify`` for yes/no questions, ``query`` for the others) and semantic (``attr`` colour, ``cat`` shape,
  ``obj`` existence and counting, ``rel`` relations).
- NLVR2: the images of a split in consecutive pairs; for each group of two pairs, statements drawn about the
  scenes ("Both images contain a red circle.", "Exactly one image contains a square.", "The left image contains
  more stars than the right image.") are labelled against each pair, so that one sentence is judged on two image
  pairs, as in NLVR2, whose consistency metric groups them. Labels are ground truth (no annotator noise).
- ``vocab.txt``: BERT's special entries, then every word and punctuation mark of the questions, statements and
  captions (BERT's basic tokens, sorted): every synthetic text splits into whole-word pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vlattn.data.wordpiece import basic_tokens

from .grammar import pick, with_article
from .lexicon import COLOURS, SHAPES
from .scene import Scene
from .vqa_gen import Question, phrase

SEMANTIC_TYPES = {"what color is the": "attr", "what shape is the": "cat", "how many": "obj", "is there a": "obj",
                  "is the": "rel"}
STATEMENTS_PER_GROUP = 2
BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def gqa_types(question: Question) -> dict[str, str]:
    """GQA's ``types`` of a synthetic question: structural, semantic and (vlattn's question type) detailed."""
    structural = "verify" if question.answer_type == "yes/no" else "query"
    return {"structural": structural, "semantic": SEMANTIC_TYPES[question.question_type],
            "detailed": question.question_type}


def gqa_record(image_id: int, question: Question) -> dict:
    """One entry of a GQA balanced questions file."""
    return {"imageId": str(image_id), "question": question.question, "answer": question.answer,
            "fullAnswer": f"The answer is {question.answer}.", "isBalanced": True, "types": gqa_types(question)}


@dataclass(frozen=True)
class Statement:
    """A statement about a pair of scenes and how to judge it: ``kind`` both | one | more, ``attrs`` the
    described objects' attributes."""

    kind: str
    attrs: tuple[tuple[str, str], ...]

    @property
    def text(self) -> str:
        attrs = dict(self.attrs)
        if self.kind == "both":
            return f"Both images contain {with_article(phrase(attrs))}."
        if self.kind == "one":
            return f"Exactly one image contains {with_article(phrase(attrs))}."
        return f"The left image contains more {phrase(attrs, plural=True)} than the right image."

    def count(self, scene: Scene) -> int:
        return sum(all(o.attributes[k] == v for k, v in self.attrs) for o in scene.objects)

    def holds(self, left: Scene, right: Scene) -> bool:
        a, b = self.count(left), self.count(right)
        if self.kind == "both":
            return a > 0 and b > 0
        if self.kind == "one":
            return (a > 0) != (b > 0)
        return a > b


def draw_statement(rng: np.random.Generator, scenes: Sequence[Scene]) -> Statement:
    """A statement about the objects of ``scenes`` (its attributes taken from one of their objects half of the
    time, so that both labels occur)."""
    kind = pick(rng, ("both", "one", "more"))
    if rng.random() < 0.5:
        source = pick(rng, pick(rng, scenes).objects).attributes
    else:
        source = {"shape": pick(rng, SHAPES), "colour": pick(rng, list(COLOURS))}
    keys = ("shape",) if kind == "more" or rng.random() < 0.5 else ("colour", "shape")
    return Statement(kind, tuple((k, source[k]) for k in keys))


def nlvr2_records(split: str, scenes: Sequence[Scene], rng: np.random.Generator) -> list[dict]:
    """LXMERT's NLVR2 records (``identifier`` split-set-pair-sentence, ``img0`` left, ``img1`` right, ``sent``,
    ``label`` 0/1) for the consecutive image pairs of ``scenes``, two pairs per set."""
    pairs = [(scenes[i], scenes[i + 1]) for i in range(0, len(scenes) - 1, 2)]
    records = []
    for set_id in range(0, len(pairs) - 1, 2):
        group = pairs[set_id : set_id + 2]
        for sentence in range(STATEMENTS_PER_GROUP):
            statement = draw_statement(rng, [scene for pair in group for scene in pair])
            for pair_id, (left, right) in enumerate(group):
                records.append({
                    "identifier": f"{split}-{set_id // 2}-{pair_id}-{sentence}", "img0": left.image_id,
                    "img1": right.image_id, "sent": statement.text, "label": int(statement.holds(left, right)),
                })
    return records


def wordpiece_entries(texts: Sequence[str]) -> list[str]:
    """``vocab.txt``'s entries: the BERT specials, then the sorted basic tokens of ``texts``."""
    words = sorted({token for text in texts for token in basic_tokens(text)} - set(BERT_SPECIALS))
    return [*BERT_SPECIALS, *words]
