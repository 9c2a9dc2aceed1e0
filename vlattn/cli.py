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

from vlattn.data.cli import app as data_app
from vlattn.errors import VlattnError
from vlattn.scoring.cli import score

app = typer.Typer(help="Attention-based vision-language models: captioning and VQA over region features.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

app.add_typer(data_app, name="data", help="Synthetic data set and feature-store conversion.")
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
    stage: str = typer.Option("xe", help="xe (cross-entropy) or scst (self-critical, needs --init)."),
    init: Optional[Path] = typer.Option(None, help="Checkpoint (or run dir) to start SCST from."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last checkpoint."),
    device: str = DEVICE,
) -> None:
    """Train a captioner; validation CIDEr-D each epoch, best/last checkpoints in OUT/checkpoints."""
    from vlattn.config import load_config
    from vlattn.stages import STAGES

    if stage not in STAGES:
        raise VlattnError(f"unknown stage {stage!r}; valid: {', '.join(STAGES)}")
    cfg = load_config(config, overrides or [])
    metrics = STAGES[stage](cfg, out, resume=resume, device=device, init=init)
    typer.echo(json.dumps({"stage": stage, "run_dir": str(out), "last_val": metrics}))


@app.command("eval")
def evaluate(
    checkpoint: Path = typer.Option(..., help="Checkpoint directory or run directory (uses its best checkpoint)."),
    split: str = typer.Option("test", help="train, val or test."),
    data: Optional[Path] = typer.Option(None, help="Data root (default: the one in the checkpoint's config)."),
    beam_size: Optional[int] = typer.Option(None, help="Beam size (default: eval.beam_size of the config)."),
    as_json: bool = typer.Option(False, "--json", help="Print the metrics as one JSON object on stdout."),
    device: str = DEVICE,
) -> None:
    """Decode a split with beam search and report BLEU, METEOR, ROUGE-L, CIDEr-D (SPICE if possible)."""
    from vlattn.commands import run_eval

    report = run_eval(checkpoint, split=split, data_root=data, beam_size=beam_size, device=device)
    if as_json:
        typer.echo(json.dumps(report))
    else:
        from vlattn.commands import format_report

        typer.echo(format_report(report))


@app.command()
def caption(
    checkpoint: Path = typer.Option(..., help="Checkpoint directory or run directory."),
    features: Path = typer.Option(..., help="Feature store: memmap dir, M2 .h5, bottom-up/MCAN npz dir, self-critical dirs, TSV, LMDB."),
    ids: Optional[List[int]] = typer.Option(None, "--ids", help="Image ids (repeatable; default: all)."),
    beam_size: Optional[int] = typer.Option(None, help="Beam size (default: eval.beam_size of the config)."),
    device: str = DEVICE,
) -> None:
    """Caption images from a feature store; prints COCO results JSON ([{image_id, caption}])."""
    from vlattn.commands import run_caption

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
    from vlattn.commands import format_profile, run_profile
    from vlattn.config import load_config

    cfg = load_config(config, overrides or [])
    report = run_profile(cfg, vocab_size=vocab_size, batch=batch, regions=regions, length=length, repeats=repeats)
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
