"""Score a COCO-format caption results file exactly as pycocoevalcap's ``COCOEvalCap`` does.

Results: ``[{"image_id": int, "caption": str}, ...]`` — the COCO caption evaluation server's format and
what ``vlattn eval`` writes (``RUN/eval/<split>_predictions.json``). The server expects one file per split
named ``captions_<split>_<alg>_results.json`` (``captions_val2014_mymodel_results.json``,
``captions_test2014_mymodel_results.json``), zipped together; our files can be renamed and uploaded as they are.

References: a COCO caption annotation file (``captions_val2014.json``: ``images`` + ``annotations``) or a
Karpathy split file (``dataset_coco.json``: ``images[].sentences[].raw``; ``split`` restricts it to one split).
The images scored are those of the results file, as COCOEvalCap is used for a subset
(``params["image_id"] = cocoRes.getImgIds()``; a Karpathy test set of 5,000 images scores against
``captions_val2014.json`` directly); an id the references do not know, or an id given twice, is refused
with the ids named (pycocotools' ``loadRes`` would stop at the first). With a Karpathy ``split`` every image of that split needs a result.

Images are scored in the reference file's order (COCOEvalCap's), captions are tokenised by the Stanford PTB
tokenizer (``tokenizer="java"``, pycocoevalcap's) or its Python re-implementation (``"python"``), and the
metrics are vlattn's BLEU, METEOR, ROUGE-L, CIDEr-D and SPICE, tested equal to pycocoevalcap's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlattn.data.jsonfiles import read_json
from vlattn.data.karpathy import SPLITS, load_coco_captions, load_karpathy, normalize_split
from vlattn.errors import ConfigError, DataError
from vlattn.metrics.evaluate import CaptionReport, evaluate_captions
from vlattn.metrics.tokenizer import java_tokenizer_jar
from vlattn.scoring.ids import check_result_ids, read_results

TOKENIZERS = ("java", "python")
METRIC_NAMES = ("BLEU", "METEOR", "ROUGE_L", "CIDEr", "SPICE")


def load_caption_results(path: str | Path) -> dict[int, str]:
    """``{image_id: caption}`` of a COCO results file; duplicate ids are refused (naming them)."""
    return read_results(path, "image_id", "caption", "image")


def _is_karpathy(data: Any) -> bool:
    images = data.get("images") if isinstance(data, dict) else None
    return isinstance(images, list) and bool(images) and isinstance(images[0], dict) and "sentences" in images[0]


def load_caption_references(path: str | Path, split: str | None = None) -> tuple[dict[int, list[str]], str]:
    """Raw reference captions ``{image_id: [caption, ...]}`` in file order, and the format (``coco``/``karpathy``)."""
    data = read_json(path)
    if _is_karpathy(data):
        wanted = normalize_split(split) if split is not None else None
        if wanted is not None and wanted not in SPLITS:
            raise ConfigError(f"unknown split {split!r}; valid: {', '.join(SPLITS)} (restval counts as train)")
        entries = [e for e in load_karpathy(path) if wanted is None or e.split == wanted]
        if not entries:
            raise DataError(f"no images of split {split!r}", path=path)
        return {entry.image_id: list(entry.raw) for entry in entries}, "karpathy"
    if isinstance(data, dict) and "annotations" in data:
        if split is not None:
            raise ConfigError("--split applies to Karpathy files; a COCO annotation file is one split already")
        return load_coco_captions(path), "coco"
    raise DataError("neither a COCO caption annotation file ('annotations') nor a Karpathy split file "
                    "('images' with 'sentences')", path=path)


@dataclass
class CaptionScore:
    """A scored results file: the metric ``report`` (with per-image values) and what was scored."""

    results: str
    references: str
    reference_format: str
    tokenizer: str
    report: CaptionReport

    def to_dict(self) -> dict[str, Any]:
        return {"task": "captions", "results": self.results, "references": self.references,
                "reference_format": self.reference_format, "images": len(self.report.image_ids),
                "tokenizer": self.tokenizer, "scores": dict(self.report.scores),
                "unavailable": dict(self.report.unavailable)}

    def per_image(self) -> list[dict[str, Any]]:
        """COCOEvalCap's ``evalImgs``: one ``{"image_id", "Bleu_1", ..., "CIDEr"[, "SPICE"]}`` per image."""
        rows = []
        for position, image_id in enumerate(self.report.image_ids):
            row: dict[str, Any] = {"image_id": image_id}
            row.update({name: values[position] for name, values in self.report.per_image.items()})
            rows.append(row)
        return rows


def score_caption_files(
    results: str | Path,
    references: str | Path,
    *,
    tokenizer: str = "java",
    split: str | None = None,
    metrics: tuple[str, ...] = METRIC_NAMES,
) -> CaptionScore:
    """Score the results file against the references (see the module notes for the rules)."""
    if tokenizer not in TOKENIZERS:
        raise ConfigError(f"unknown tokenizer {tokenizer!r}; valid: {', '.join(TOKENIZERS)}")
    if tokenizer == "java" and java_tokenizer_jar()[0] is None:
        raise ConfigError(f"the Java PTB tokenizer cannot run ({java_tokenizer_jar()[1]}); use --tokenizer python")
    predictions = load_caption_results(results)
    refs, layout = load_caption_references(references, split)
    check_result_ids(list(predictions), refs, kind="image", path=results, reference=references,
                     required=refs if split is not None else None)
    scored = {image_id: captions for image_id, captions in refs.items() if image_id in predictions}
    report = evaluate_captions(scored, predictions, tokenizer_backend=tokenizer, metrics=metrics)
    return CaptionScore(str(results), str(references), layout, tokenizer, report)
