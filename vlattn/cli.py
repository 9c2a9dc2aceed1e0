"""The ``vlattn`` command: train, eval, caption, score, profile, and data tools.

Errors about user input (:class:`vlattn.errors.VlattnError`) are printed as one line on stderr and
exit with status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from vlattn.catt.cli import app as catt_app
from vlattn.data.cli import app as data_app
from vlattn.errors import VlattnError
from vlattn.scoring.cli import score

app = typer.Typer(help="Attention-based vision-language models: captioning and VQA over region features.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

app.add_typer(data_app, name="data", help="Synthetic data set and feature-store conversion.")
app.add_typer(catt_app, name="catt", help="Causal Attention: k-means dictionaries ahead of training.")
app.command()(score)

@app.callback()
def options(
    threads: int = typer.Option(0, "--threads", help="torch intra-op threads (0 = torch's default)."),
) -> None:
    """Attention-based vision-language models: captioning and VQA over region features."""
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


CONFIG = typer.Option(..., "--config", "-c", help="YAML config (see configs/).")
SET = typer.Option(None, "--set", help="Override a config value: section.key=value (repeatable).")
DEVICE = typer.Option("auto", help="cpu, cuda, cuda:N or auto.")


@app.command()
def train(
    config: Path = CONFIG,
    out: Path = typer.Option(..., "--out", "-o", help="Run directory (checkpoints, logs, predictions)."),
    overrides: Optional[List[str]] = SET,
    stage: Optional[str] = typer.Option(
        None, help="Stage of the config's task (default: its first). Captioning: xe (cross-entropy), "
                   "scst (self-critical, needs --init)."),
    init: Optional[Path] = typer.Option(None, help="Checkpoint (or run dir) whose weights the run starts from."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last checkpoint."),
    device: str = DEVICE,
) -> None:
    """Train a stage of the config's task; validation each epoch, best/last checkpoints in OUT/checkpoints."""
    from vlattn.config import load_config
    from vlattn.tasks import stage_of, task_of
    from vlattn.training.stage import run_stage

    cfg = load_config(config, overrides or [])
    chosen = stage_of(task_of(cfg.task), stage)
    metrics = run_stage(chosen, cfg, out, resume=resume, device=device, init=init)
    typer.echo(json.dumps({"task": cfg.task, "stage": chosen.name, "run_dir": str(out), "last_val": metrics}))


@app.command("eval")
def evaluate(
    checkpoint: Path = typer.Option(..., help="Checkpoint directory or run directory (uses its best checkpoint)."),
    split: Optional[str] = typer.Option(None, help="Split to score (default: the task's; captioning: test)."),
    data: Optional[Path] = typer.Option(None, help="Data root (default: the one in the checkpoint's config)."),
    beam_size: Optional[int] = typer.Option(None, help="Beam size (default: eval.beam_size of the config)."),
    as_json: bool = typer.Option(False, "--json", help="Print the metrics as one JSON object on stdout."),
    device: str = DEVICE,
) -> None:
    """Score a trained model on a split, as its task does (captioning: beam search; BLEU, METEOR, ROUGE-L,
    CIDEr-D, SPICE if possible)."""
    from vlattn.tasks import EvalRequest, evaluate as run_eval, format_report

    report = run_eval(checkpoint, EvalRequest(split=split, data_root=data, beam_size=beam_size, device=device))
    typer.echo(json.dumps(report) if as_json else format_report(report))


@app.command()
def caption(
    checkpoint: Path = typer.Option(..., help="Checkpoint directory or run directory."),
    features: Path = typer.Option(..., help="Feature store: memmap dir, M2 .h5, bottom-up/MCAN npz dir, self-critical dirs, TSV, LMDB."),
    ids: Optional[List[int]] = typer.Option(None, "--ids", help="Image ids (repeatable; default: all)."),
    beam_size: Optional[int] = typer.Option(None, help="Beam size (default: eval.beam_size of the config)."),
    device: str = DEVICE,
) -> None:
    """Caption images from a feature store; prints COCO results JSON ([{image_id, caption}])."""
    from vlattn.tasks.captioning import caption as run_caption

    typer.echo(json.dumps(run_caption(checkpoint, features, ids or None, beam_size=beam_size, device=device)))


@app.command()
def profile(
    config: Path = CONFIG,
    overrides: Optional[List[str]] = SET,
    vocab_size: int = typer.Option(10201, help="Vocabulary size."),
    batch: int = typer.Option(10, help="Batch size for FLOPs/latency."),
    regions: int = typer.Option(50, help="Regions per image."),
    length: int = typer.Option(20, help="Caption length (training step) / decoding steps."),
    repeats: int = typer.Option(5, help="Latency measurements (median reported)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Parameters (total and per module), FLOPs of a training and a decoding step, and latency."""
    from vlattn.config import load_config
    from vlattn.models.profile import format_profile
    from vlattn.tasks import ProfileShapes, task_of

    cfg = load_config(config, overrides or [])
    shapes = ProfileShapes(batch=batch, regions=regions, length=length, vocab_size=vocab_size, repeats=repeats)
    report = task_of(cfg.task).profile(cfg, shapes)
    typer.echo(json.dumps(report) if as_json else format_profile(report))


def main() -> None:
    """Console entry point: one-line errors for bad input."""
    try:
        app()
    except VlattnError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
