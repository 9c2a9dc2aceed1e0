"""References and predictions are tokenised in two separate passes, as pycocoevalcap's COCOEvalCap does
(``tokenizer.tokenize(gts)``, then ``tokenizer.tokenize(res)``). The PTB lexer reads one stream per call and a few
of its rules look past the end of a line: "letter B." followed by a line starting "The" is "b ." (an initial
before a sentence start), at the end of the stream it stays "b.". In one joint pass the last reference would be
followed by the first prediction, and its tokens would depend on that prediction."""

from __future__ import annotations

import pytest

from vlattn.metrics import evaluate_captions
from vlattn.metrics.tokenizer import java_tokenizer_jar

CAPTION = "The sign shows the letter B."
GTS = {1: [CAPTION]}
RES = {1: CAPTION}


def backends() -> list:
    java = pytest.param("java", marks=pytest.mark.skipif(java_tokenizer_jar()[0] is None, reason="no Java tokenizer"))
    return ["python", java]


@pytest.mark.parametrize("backend", backends())
def test_a_prediction_identical_to_its_reference_scores_one(backend: str) -> None:
    """Tokenised apart, the reference and the identical prediction are the same tokens, so BLEU-1..4 and
    ROUGE-L are 1; tokenised as one stream, the reference (followed by "The ...") would end in "b" and the
    prediction (at the end of the stream) in "b.": BLEU-1 5/6."""
    report = evaluate_captions(GTS, RES, tokenizer_backend=backend, metrics=("BLEU", "ROUGE_L"))
    for name in ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "ROUGE_L"):
        assert report.scores[name] == pytest.approx(1.0, abs=1e-9), (name, report.scores)


@pytest.mark.skipif(java_tokenizer_jar()[0] is None, reason="no Java tokenizer")
def test_tokens_equal_pycocoevalcaps_separate_passes() -> None:
    """pycocoevalcap's own PTBTokenizer (the jar), called on the references and on the predictions apart, as
    COCOEvalCap.evaluate() does; vlattn's BLEU on those tokens must be its score for the raw captions."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    gts = {1: [CAPTION, "A sign with a big letter B."], 2: ["Two dogs, U.S."]}
    res = {1: "The letter B.", 2: "The dogs"}
    tokenizer = PTBTokenizer()
    tok_gts = tokenizer.tokenize({i: [{"caption": c} for c in caps] for i, caps in gts.items()})
    tok_res = tokenizer.tokenize({i: [{"caption": c}] for i, c in res.items()})
    expected, _ = Bleu(4).compute_score(tok_gts, tok_res)
    report = evaluate_captions(gts, res, tokenizer_backend="java", metrics=("BLEU",))
    assert [report.scores[f"Bleu_{n}"] for n in range(1, 5)] == pytest.approx(expected, abs=1e-12)
