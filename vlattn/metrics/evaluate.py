"""One call that tokenises captions and scores them with the COCO caption metrics.

Options the anchors differ on are explicit: ``collapse_repeats`` (default off) collapses consecutive
repeated words of each prediction after tokenisation ("a dog dog runs" -> "a dog runs"), as the M2 code does
before scoring. Metrics that cannot run (no Java, no SPICE models) are listed in ``unavailable`` with the
reason, never given a number.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, Sequence

from vlattn.errors import DataError
from vlattn.metrics.bleu import Bleu
from vlattn.metrics.cider import CiderD
from vlattn.metrics.meteor import Meteor, take_meteor
from vlattn.metrics.rouge import Rouge
from vlattn.metrics.spice import Spice
from vlattn.metrics.tokenizer import PTBTokenizer

Scores = dict[str, float]
PerImage = dict[str, list]  # metric name -> one value per image, in the order of the references
Refs = Mapping[Hashable, Sequence[str]]


def _bleu(gts: Refs, res: Refs) -> tuple[Scores, PerImage]:
    corpus, per_image = Bleu(4).compute_score(gts, res)
    names = [f"Bleu_{k + 1}" for k in range(4)]
    return ({n: float(s) for n, s in zip(names, corpus)},
            {n: [float(v) for v in values] for n, values in zip(names, per_image)})


def _rouge(gts: Refs, res: Refs) -> tuple[Scores, PerImage]:
    score, per_image = Rouge().compute_score(gts, res)
    return {"ROUGE_L": float(score)}, {"ROUGE_L": [float(v) for v in per_image]}


def _cider(gts: Refs, res: Refs) -> tuple[Scores, PerImage]:
    score, per_image = CiderD().compute_score(gts, res)
    return {"CIDEr": float(score)}, {"CIDEr": [float(v) for v in per_image]}


def _meteor(gts: Refs, res: Refs, meteor: Meteor | None = None) -> tuple[Scores, PerImage]:
    """METEOR with ``meteor`` (possibly started early by the caller) or a fresh process; closes it."""
    with meteor or Meteor() as bridge:
        if not bridge.available():
            raise _Unavailable(bridge.reason)
        score, per_image = bridge.compute_score(gts, res)
        return {"METEOR": float(score)}, {"METEOR": [float(v) for v in per_image]}


def _spice(gts: Refs, res: Refs) -> tuple[Scores, PerImage]:
    spice = Spice()
    if not spice.available():
        raise _Unavailable(spice.reason)
    score, per_image = spice.compute_score(gts, res)
    return {"SPICE": float(score)}, {"SPICE": list(per_image)}


class _Unavailable(Exception):
    """A metric that cannot be computed on this machine; the message is the reason."""


METRICS: dict[str, Callable[[Refs, Refs], tuple[Scores, PerImage]]] = {
    "BLEU": _bleu, "METEOR": _meteor, "ROUGE_L": _rouge, "CIDEr": _cider, "SPICE": _spice,
}


@dataclass
class CaptionReport:
    """``scores`` (Bleu_1..Bleu_4, METEOR, ROUGE_L, CIDEr, SPICE as computed), ``unavailable`` (metric -> reason),
    ``per_image`` (metric -> one value per image of ``image_ids``; SPICE's are pycocoevalcap's score dicts) and
    ``tokenizer`` (the PTB backend used; for Python, where it can differ from the jar, see
    :meth:`vlattn.metrics.tokenizer.PTBTokenizer.describe`)."""

    scores: dict[str, float] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    per_image: PerImage = field(default_factory=dict)
    image_ids: list[Hashable] = field(default_factory=list)
    tokenizer: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {"scores": dict(self.scores), "unavailable": dict(self.unavailable), "tokenizer": dict(self.tokenizer)}


def collapse_repeated_words(caption: str) -> str:
    """Collapse runs of the same word: ``"a dog dog runs" -> "a dog runs"``."""
    return " ".join(word for word, _ in itertools.groupby(caption.split()))


def evaluate_captions(
    gts: Mapping[int, Sequence[str]],
    res: Mapping[int, str],
    *,
    collapse_repeats: bool = False,
    tokenizer_backend: str = "auto",
    metrics: Sequence[str] = ("BLEU", "METEOR", "ROUGE_L", "CIDEr", "SPICE"),
) -> CaptionReport:
    """Score raw predictions ``{image_id: caption}`` against raw references ``{image_id: [caption, ...]}``.

    Images are scored in the order of ``gts`` (the order of the per-image values).
    """
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; valid: {', '.join(METRICS)}")
    missing = [i for i in gts if i not in res]
    extra = [i for i in res if i not in gts]
    if missing or extra:
        raise DataError(f"predictions and references differ: {len(missing)} images without a prediction "
                        f"{missing[:5]}, {len(extra)} predictions without references {extra[:5]}")
    empty = [i for i, refs in gts.items() if not refs]
    if empty:
        raise DataError("image has no reference captions", item=empty[0])
    meteor = take_meteor() if "METEOR" in metrics else None
    if meteor is not None and meteor.available():
        meteor.start()  # its Java start-up (paraphrase table) overlaps the tokenisation and the other metrics
    try:
        tok_gts, tok_res, tokenizer = _tokenize(gts, res, tokenizer_backend, collapse_repeats)
        runners = {**METRICS, "METEOR": functools.partial(_meteor, meteor=meteor)}
        results: dict[str, tuple[Scores, PerImage] | str] = {}
        for name in sorted(metrics, key=lambda m: m == "METEOR"):  # METEOR last: its start-up has had most time
            try:
                results[name] = runners[name](tok_gts, tok_res)
            except _Unavailable as reason:
                results[name] = str(reason)
    finally:
        if meteor is not None:
            meteor.close()
    report = CaptionReport(image_ids=list(gts), tokenizer=tokenizer)
    for name in metrics:  # reported in the order asked for
        outcome = results[name]
        if isinstance(outcome, str):
            report.unavailable[name] = outcome
        else:
            report.scores.update(outcome[0])
            report.per_image.update(outcome[1])
    return report


def _tokenize(
    gts: Mapping[int, Sequence[str]], res: Mapping[int, str], backend: str, collapse_repeats: bool
) -> tuple[dict[int, list[str]], dict[int, list[str]], dict[str, Any]]:
    """PTB-tokenised references and predictions, and the tokenizer's description. Two tokenizer calls, as
    pycocoevalcap makes them: the lexer reads each call as one stream and a few rules look past the end of a line
    ("letter B." before a line starting "The" is "b ."), so in one call the last reference's tokens would depend on
    the first prediction."""
    tokenizer = PTBTokenizer(backend)
    tok_gts = tokenizer.tokenize({i: list(refs) for i, refs in gts.items()})
    tok_res = tokenizer.tokenize({i: [res[i]] for i in gts})
    if collapse_repeats:
        tok_res = {i: [collapse_repeated_words(c) for c in caps] for i, caps in tok_res.items()}
    texts = [*(text for refs in gts.values() for text in refs), *(res[i] for i in gts)]
    return tok_gts, tok_res, tokenizer.describe(texts)


def best_constant_caption(
    gts: Mapping[int, Sequence[str]],
    candidates: Sequence[str] | None = None,
    *,
    num_candidates: int = 20,
    tokenizer_backend: str = "auto",
) -> tuple[str, float]:
    """The single caption that maximises CIDEr-D when predicted for every image, and that CIDEr-D.

    It is chosen among ``candidates`` (raw strings), by default the ``num_candidates`` most frequent
    tokenised reference captions of ``gts``. Returns the tokenised caption and its score.
    """
    tokenizer = PTBTokenizer(tokenizer_backend)
    tok_gts = tokenizer.tokenize(dict(gts))
    if candidates is None:
        counts = Counter(c for refs in tok_gts.values() for c in refs)
        pool = [c for c, _ in counts.most_common(num_candidates)]
    else:
        pool = tokenizer.tokenize({0: list(candidates)})[0]
    if not pool:
        raise ValueError("no candidate captions")
    cider = CiderD()
    scored = [(float(cider.compute_score(tok_gts, {i: [c] for i in tok_gts})[0]), c) for c in pool]
    score, caption = max(scored, key=lambda item: item[0])
    return caption, score
