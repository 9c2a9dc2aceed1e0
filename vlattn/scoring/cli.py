"""The ``vlattn score`` command: score a results file (captions or VQA) without a model."""

from __future__ import annotations

import json
import os
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer

from vlattn.errors import ConfigError, DataError


class Task(str, Enum):
    captions = "captions"
    vqa = "vqa"


class Tokenizer(str, Enum):
    java = "java"
    python = "python"


def format_captions(summary: dict[str, Any]) -> str:
    """Metric table of a caption score."""
    lines = [f"{summary['images']} images of {summary['results']} vs {summary['references']} "
             f"({summary['reference_format']}, {summary['tokenizer']} tokenizer)"]
    lines += [f"  {name:<8} {value:.4f}" for name, value in summary["scores"].items()]
    lines += [f"  {name:<8} not computed: {reason}" for name, reason in summary["unavailable"].items()]
    return "\n".join(lines)


def format_vqa(summary: dict[str, Any]) -> str:
    """Accuracy table (percent, two decimals as the official script) of a VQA score."""
    lines = [f"{summary['questions']} questions of {summary['results']} vs {summary['annotations']}",
             f"  overall  {summary['overall']:.2f}", "  per answer type:"]
    lines += [f"    {name:<24} {value:6.2f}" for name, value in summary["perAnswerType"].items()]
    lines.append("  per question type:")
    lines += [f"    {name:<24} {value:6.2f}" for name, value in summary["perQuestionType"].items()]
    return "\n".join(lines)


def score(
    results: Path = typer.Option(..., "--results", help="Results file: [{image_id, caption}] (COCO format, e.g. "
                                 "written by `vlattn eval`) or, with --task vqa, [{question_id, answer}]."),
    annotations: Path = typer.Option(..., "--annotations", help="References: captions_val2014.json or a Karpathy "
                                     "dataset_coco.json; with --task vqa the VQA annotations file."),
    task: Task = typer.Option(Task.captions, "--task", help="captions or vqa."),
    questions: Optional[Path] = typer.Option(None, "--questions", help="VQA questions file (checked against the "
                                             "annotations)."),
    tokenizer: Tokenizer = typer.Option(Tokenizer.java, "--tokenizer", help="PTB tokenizer for captions: java "
                                        "(pycocoevalcap's) or python (no Java needed)."),
    metrics: Optional[str] = typer.Option(None, "--metrics", help="Comma-separated caption metrics to compute "
                                          "(default all: BLEU,METEOR,ROUGE_L,CIDEr,SPICE)."),
    split: Optional[str] = typer.Option(None, "--split", help="Karpathy references only: score this split "
                                        "(every image of it needs a result)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    per_image: Optional[Path] = typer.Option(None, "--per-image", help="Write per-image (captions) or per-question "
                                             "(VQA) scores to this new JSON file (an existing file is never "
                                             "replaced)."),
) -> None:
    """Score a results file as the official tools do: COCOEvalCap metrics for captions, VQA accuracy for VQA.

    Examples: vlattn score --results captions_val2014_mine_results.json --annotations captions_val2014.json;
    vlattn score --task vqa --results R.json --questions Q.json --annotations A.json
    """
    from vlattn.io import atomic_write_text

    if per_image is not None and os.path.lexists(per_image):
        raise DataError("--per-image: exists; vlattn does not replace it (choose a new file name)", path=per_image)
    if task is Task.vqa:
        from vlattn.scoring.vqa import score_vqa_files

        if split is not None or metrics is not None:
            raise ConfigError("--split and --metrics apply to captions, not to --task vqa")
        scored: Any = score_vqa_files(results, annotations, questions)
    else:
        from vlattn.scoring.captions import METRIC_NAMES, score_caption_files

        if questions is not None:
            raise ConfigError("--questions applies to --task vqa")
        names = tuple(m.strip() for m in metrics.split(",")) if metrics else METRIC_NAMES
        unknown = [m for m in names if m not in METRIC_NAMES]
        if unknown:
            raise ConfigError(f"unknown metric(s) {unknown}; valid: {', '.join(METRIC_NAMES)}")
        scored = score_caption_files(results, annotations, tokenizer=tokenizer.value, split=split, metrics=names)
    summary = scored.to_dict()
    if as_json:
        typer.echo(json.dumps(summary))
    else:
        typer.echo(format_vqa(summary) if task is Task.vqa else format_captions(summary))
    if per_image is not None:  # after the scores are shown, so a failed write loses nothing computed
        atomic_write_text(per_image, json.dumps(scored.per_image(), ensure_ascii=False), replace=False)
