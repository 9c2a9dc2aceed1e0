"""The ``vlattn`` command: train, eval, caption, answer, score, profile, and data tools.

Errors about user input (:class:`vlattn.errors.VlattnError`) are printed as one line on stderr and
exit with status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from vlattn.commands.catt import app as catt_app
from vlattn.data.cli import StoreFormat, app as data_app
from vlattn.errors import ConfigError, TrainingInterrupted, VlattnError, WriteError
from vlattn.io import is_write_error
from vlattn.scoring.cli import score

app = typer.Typer(help="Attention-based vision-language models: captioning and VQA over region features.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

app.add_typer(data_app, name="data", help="Synthetic data set and feature-store conversion.")
app.add_typer(catt_app, name="catt", help="Causal Attention: k-means dictionaries ahead of training.")
features_app = typer.Typer(help="Region features from image files.", no_args_is_help=True)
app.add_typer(features_app, name="features", help="Region features from image files (vlattn features extract).")
config_app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
app.add_typer(config_app, name="config", help="The shipped presets and resolved configs.")
app.command()(score)

@app.callback()
def options(
    threads: int = typer.Option(0, "--threads", help="torch intra-op threads (0 = torch's default)."),
) -> None:
    """Attention-based vision-language models: captioning and VQA over region features."""
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


CONFIG_HELP = "Preset name (`vlattn config list`) or YAML/JSON config file."
CONFIG = typer.Option(..., "--config", "-c", help=CONFIG_HELP)
SET = typer.Option(None, "--set", help="Override a config value: section.key=value (repeatable).")
DEVICE = typer.Option("auto", help="cpu, cuda, cuda:N or auto.")
BEAM_SIZE = typer.Option(
    None, help="Beam size (1 = greedy), or auto: the size among eval.beam_candidates with the best validation "
               "CIDEr-D (recorded after training, else chosen now). Default: eval.beam_size of the config.")


def beam_size_option(value: str | None) -> int | str | None:
    """``--beam-size``: None, ``auto`` or a whole number (checked against the vocabulary by the task)."""
    if value is None or value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"--beam-size: expected a whole number or auto, got {value!r}") from None


PACKED_OUTPUT = typer.Option(
    None, "--packed-output/--plain-output",
    help="CPU decoding: the vocabulary projection with oneDNN from a weight packed once (default: eval.packed_output "
         "of the config).")


@app.command()
def train(
    config: Optional[str] = typer.Option(
        None, "--config", "-c", help=f"{CONFIG_HELP} With --resume optional: the run keeps its own config (change "
                                     "training settings with --set)."),
    out: Path = typer.Option(..., "--out", "-o", help="Run directory (checkpoints, logs, predictions)."),
    overrides: Optional[List[str]] = SET,
    stage: Optional[str] = typer.Option(
        None, help="Stage of the config's task (default: its first; on --resume the run's). Captioning: xe "
                   "(cross-entropy), scst (self-critical, needs --init)."),
    init: Optional[Path] = typer.Option(None, help="Checkpoint (or run dir) whose weights the run starts from."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last checkpoint."),
    device: str = DEVICE,
) -> None:
    """Train a stage of the config's task; validation each epoch, best/last checkpoints in OUT/checkpoints.

    Ctrl-C (SIGINT) or SIGTERM saves OUT/checkpoints/last at the next step and exits with status 130/143;
    --resume continues from there."""
    from vlattn.validation import load_valid_config
    from vlattn.tasks import stage_for_run
    from vlattn.training.stage import run_stage

    cfg = load_valid_config(config, overrides or []) if config is not None else None
    task, chosen = stage_for_run(cfg, out, stage, resume=resume)
    metrics = run_stage(chosen, cfg, out, overrides=overrides or [], resume=resume, device=device, init=init)
    typer.echo(json.dumps({"task": task, "stage": chosen.name, "run_dir": str(out), "last_val": metrics}))


@app.command()
def explain(
    checkpoint: Path = typer.Option(..., "--checkpoint", help="Run directory or checkpoint."),
    image_id: int = typer.Option(..., "--image-id", help="Image id in the run's feature store."),
    out: Path = typer.Option(..., "--out", "-o", help="New directory for index.html and its PNGs."),
    question: Optional[str] = typer.Option(None, help="The question (VQA checkpoints)."),
    image: Optional[Path] = typer.Option(None, help="The picture to draw the boxes on (default: the data set's)."),
    device: str = DEVICE,
) -> None:
    """What the model attends to for one image: the caption (or answer) and, per word, the attention over the
    regions and each mechanism's own view, as OUT/index.html (opens from disk; matplotlib: the viz extra)."""
    from vlattn.viz.explain import explain as run

    typer.echo(f"wrote {run(checkpoint, image_id, out, question=question, image=image, device=device)}")


@app.command()
def compare(
    runs: List[Path] = typer.Argument(..., help="Run directories (their best checkpoints and eval outputs)."),
    split: str = typer.Option("test", help="The evaluated split whose metrics are shown."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Also write a bar chart (a new .png file)."),
    repeats: int = typer.Option(3, min=1, max=100, help="Latency measurements (median)."),
) -> None:
    """The runs side by side: test metrics (from `vlattn eval`), parameters, backbone MAdds, inference FLOPs and
    latency, measured alike for every run."""
    from vlattn.viz.compare import chart, compare as measure, table
    from vlattn.viz.figures import write_new_png

    columns, rows = measure(runs, split, repeats)
    typer.echo(table(columns, rows))
    if out is not None:
        write_new_png(out, chart(columns, rows))
        typer.echo(f"wrote {out}")


@app.command()
def plot(
    runs: List[Path] = typer.Argument(..., help="Run directories (their metrics.jsonl)."),
    out: Path = typer.Option(..., "--out", "-o", help="FILE.png, or FILE.html (with FILE.png beside it)."),
) -> None:
    """Training curves of one or more runs: loss and learning rate per step, each validation metric per epoch,
    the runs overlaid (matplotlib: the viz extra)."""
    from vlattn.viz.curves import write_plot

    typer.echo(f"wrote {write_plot(runs, out)}")


@app.command("eval")
def evaluate(
    checkpoint: Path = typer.Option(..., help="Checkpoint directory or run directory (uses its best checkpoint)."),
    split: Optional[str] = typer.Option(None, help="Split to score (default: the task's; captioning: test)."),
    data: Optional[Path] = typer.Option(None, help="Data root (default: the one in the checkpoint's config)."),
    beam_size: Optional[str] = BEAM_SIZE,
    as_json: bool = typer.Option(False, "--json", help="Print the metrics as one JSON object on stdout."),
    device: str = DEVICE,
    packed_output: Optional[bool] = PACKED_OUTPUT,
) -> None:
    """Score a trained model on a split, as its task does (captioning: beam search; BLEU, METEOR, ROUGE-L,
    CIDEr-D, SPICE if possible)."""
    from vlattn.tasks import EvalRequest, evaluate as run_eval, format_report

    def show(report: dict) -> None:  # before the outputs are written: a failed write still shows the metrics
        typer.echo(json.dumps(report) if as_json else format_report(report))

    run_eval(checkpoint, EvalRequest(split=split, data_root=data, beam_size=beam_size_option(beam_size),
                                     device=device, packed_output=packed_output, show=show))


EXTRACTOR = typer.Option(None, "--extractor", help="The extractor the run was trained with (checked; default: the "
                         "one its feature store recorded).")
EXTRACTOR_WEIGHTS = typer.Option(None, "--weights", help="The extractor's weights when they are not where the run's "
                                 "store recorded them (their SHA-256 is checked).")


@app.command()
def caption(
    checkpoint: Path = typer.Option(..., help="Checkpoint directory or run directory."),
    features: Optional[Path] = typer.Option(None, help="Feature store: memmap dir, M2 .h5, bottom-up/MCAN npz dir, "
                                            "self-critical dirs, TSV, LMDB."),
    images: Optional[List[Path]] = typer.Option(None, "--images", help="Image files to caption instead (repeatable): "
                                                "features made on the fly with the run's extractor."),
    ids: Optional[List[int]] = typer.Option(None, "--ids", help="Image ids (repeatable; default: all)."),
    beam_size: Optional[str] = BEAM_SIZE,
    extractor: Optional[str] = EXTRACTOR,
    weights: Optional[str] = EXTRACTOR_WEIGHTS,
    device: str = DEVICE,
    packed_output: Optional[bool] = PACKED_OUTPUT,
) -> None:
    """Caption images from a feature store or image files; prints COCO results JSON ([{image_id, caption}])."""
    from vlattn.tasks.captioning import caption as run_caption

    rows = run_caption(checkpoint, features, ids or None, beam_size=beam_size_option(beam_size), device=device,
                       packed_output=packed_output, images=images or None, extractor=extractor, weights=weights)
    typer.echo(json.dumps(rows))


@features_app.command("extract")
def features_extract(
    images: List[Path] = typer.Option(..., "--images", help="Image files or directories of them (repeatable); the "
                                      "image id is the last run of digits of each file name."),
    out: Path = typer.Option(..., "--out", "-o", help="Feature store to write; an existing store of the same "
                             "extractor is completed (its images are skipped)."),
    extractor: str = typer.Option(..., "--extractor", help="grid (ResNet grid), regions (Faster R-CNN boxes), synth "
                                  "(the synthetic set's CNN)."),
    weights: Optional[str] = typer.Option(
        None, "--weights", help="A weights file, torchvision[:NAME] (downloaded by torchvision on first use) or "
        "random[:SEED]; synth: the data set's directory or extractor.safetensors. Default: torchvision's DEFAULT "
        "weights (grid, regions)."),
    settings: Optional[List[str]] = typer.Option(
        None, "--set", help="Extractor setting key=value (repeatable): grid: arch, grid, size; regions: arch, "
        "min_size, max_size, score_threshold, nms, min_boxes, max_boxes, pool; synth: grid."),
    format: StoreFormat = typer.Option("memmap", "--format", help="Layout of the store."),
    batch: int = typer.Option(8, "--batch", help="Images per forward pass."),
    workers: int = typer.Option(2, "--workers", help="Threads decoding images ahead of the model (0: none)."),
    device: str = DEVICE,
    strict: bool = typer.Option(False, "--strict", help="An unreadable image is an error (nothing written) instead of "
                                "being skipped and counted."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar on stderr."),
) -> None:
    """Extract region features from image files into a feature store (the extractor is recorded in it).

    Ctrl-C writes what is done; the same command continues. Example:
    vlattn features extract --images photos/ --out feats --extractor regions"""
    from vlattn.config import apply_overrides
    from vlattn.pixels.extract import extract_images
    from vlattn.pixels.images import list_images
    from vlattn.pixels.registry import build_extractor
    from vlattn.pixels.weights import parse_weights
    from vlattn.training.distributed import pick_device

    files = list_images(images)
    built = build_extractor(extractor, parse_weights(weights) if weights is not None else None,
                            apply_overrides({}, settings or []), pick_device(device))
    report = extract_images(files, out, built, format=format.value, batch=batch, workers=workers, strict=strict,
                            progress=progress)
    typer.echo(report.summary())
    if report.interrupted:
        raise typer.Exit(130)


@app.command()
def profile(
    config: str = CONFIG,
    overrides: Optional[List[str]] = SET,
    vocab_size: Optional[int] = typer.Option(None, help="Word vocabulary size (default: the task's; captioning 10201)."),
    batch: Optional[int] = typer.Option(None, help="Batch size for FLOPs/latency (default 10)."),
    regions: Optional[int] = typer.Option(None, help="Regions per image (default: the grid cells of a model "
                                                     "reading a fixed grid, else captioning 50, VQA 100)."),
    length: Optional[int] = typer.Option(None, help="Caption length / decoding steps (captioning, default 20) or "
                                                     "question words (VQA, default 14)."),
    answers: Optional[int] = typer.Option(None, help="Candidate answers (VQA, default 3129)."),
    repeats: Optional[int] = typer.Option(None, help="Latency measurements (median reported; default 5)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Parameters (total, per module, backbone), FLOPs of a training step and of inference (captioning: a decoding
    step; VQA: answering a batch), backbone multiply-adds per sample (the LW-Transformer paper's MAdds), latency."""
    import dataclasses

    from vlattn.validation import load_valid_config
    from vlattn.models.profile import format_profile
    from vlattn.tasks import task_of

    cfg = load_valid_config(config, overrides or [])
    task = task_of(cfg.task)
    given = dict(batch=batch, regions=regions, length=length, vocab_size=vocab_size, repeats=repeats, answers=answers)
    shapes = dataclasses.replace(task.profile_shapes, **{k: v for k, v in given.items() if v is not None})
    shapes.check(cfg)
    report = task.profile(cfg, shapes)
    typer.echo(json.dumps(report) if as_json else format_profile(report))


@app.command()
def answer(
    checkpoint: Path = typer.Option(..., help="VQA checkpoint directory or run directory (uses its best checkpoint)."),
    features: Optional[Path] = typer.Option(None, help="Feature store holding the image (any layout vlattn reads)."),
    image_id: Optional[int] = typer.Option(None, "--image-id", help="Image id in the feature store."),
    image: Optional[Path] = typer.Option(None, "--image", help="An image file instead of --features/--image-id: "
                                         "features made on the fly with the run's extractor."),
    question: str = typer.Option(..., help="The question, e.g. \"What color is the cube?\"."),
    top: int = typer.Option(5, help="Number of answers to list."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    extractor: Optional[str] = EXTRACTOR,
    weights: Optional[str] = EXTRACTOR_WEIGHTS,
    device: str = DEVICE,
) -> None:
    """Answer a question about one image: the top candidate answers with their scores (sigmoid, 0-1)."""
    from vlattn.tasks.vqa import answer as run_answer, format_answers

    result = run_answer(checkpoint, features, image_id, question, top=top, device=device, image=image,
                        extractor=extractor, weights=weights)
    typer.echo(json.dumps(result) if as_json else format_answers(result))


@app.command("import-checkpoint")
def import_checkpoint(
    source: Path = typer.Argument(..., help="The released checkpoint: a .pth file (m2-official); a directory with "
                                  "config.json + model.safetensors or pytorch_model.bin, or a weights file (lxmert-hf)."),
    fmt: str = typer.Option(..., "--format", help="Checkpoint format: m2-official (aimagelab/meshed-memory-transformer), "
                            "lxmert-hf (LXMERT in transformers' or the released code's names)."),
    vocab: Optional[Path] = typer.Option(
        None, "--vocab", help="Word table in index order: a JSON list of strings (any token) or text with one word per line "
        "(m2-official: docs/m2-official.md; "
        "lxmert-hf: BERT's vocab.txt, default SOURCE/vocab.txt)."),
    out: Path = typer.Option(..., "--out", "-o", help="New run directory to write."),
    heads: Optional[int] = typer.Option(None, help="Attention heads when the checkpoint does not record them "
                                        "(m2-official: 8; lxmert-hf: config.json's, else 12)."),
    answers: Optional[Path] = typer.Option(
        None, "--answers", help="lxmert-hf: the answer head's labels, a JSON list in label order (LXMERT's "
        "trainval_label2ans.json); default: config.json's id2label."),
    config: Optional[str] = typer.Option(
        None, "--config", "-c", help="Preset or YAML whose data/train/eval sections the run uses (default: the released "
        "evaluation settings); the model section comes from the checkpoint (lxmert-hf: an LXMERT-family config keeps "
        "its kind, sites and options, e.g. vqa-lxmert-catt, vqa-lw-lxmert: the fitting tensors load, the rest are "
        "initialised and listed in import.json)."),
) -> None:
    """Convert another project's released checkpoint into a vlattn run directory (for eval, caption, answer, SCST)."""
    from vlattn.validation import load_valid_config
    from vlattn.importers import import_checkpoint as run_import

    base = load_valid_config(config) if config is not None else None
    typer.echo(json.dumps(run_import(fmt, source, vocab, out, heads=heads, base=base, answers=answers)))


@config_app.command("list")
def config_list() -> None:
    """The shipped presets, one per line: name and description."""
    from vlattn.shipped_presets import describe

    described = describe()
    width = max(map(len, described))
    for name, description in described.items():
        typer.echo(f"{name:<{width}}  {description}")


@config_app.command("show")
def config_show(
    config: str = typer.Argument(..., help=CONFIG_HELP),
    overrides: Optional[List[str]] = SET,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of YAML."),
) -> None:
    """The fully resolved config (base chain, overrides and defaults filled in), validated, as YAML."""
    import yaml

    from vlattn.config import config_to_dict
    from vlattn.validation import load_valid_config

    data = config_to_dict(load_valid_config(config, overrides or []))
    typer.echo(json.dumps(data, indent=2) if as_json else yaml.safe_dump(data, sort_keys=False).rstrip())


def main() -> None:
    """Console entry point: one-line errors for bad input; a rank of a distributed run ends through
    :func:`~vlattn.training.distributed.end_rank` (no interpreter finalization)."""
    try:
        _main()
    except SystemExit as done:
        _end_if_rank(done.code)
        raise
    _end_if_rank(0)


def _end_if_rank(code: object) -> None:
    """In a rank of a distributed run, end the process with the status ``sys.exit(code)`` gives (a message is
    printed and means 1); elsewhere nothing."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is None or not distributed.is_available() or not distributed.is_initialized():
        return
    from vlattn.training.distributed import end_rank

    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    end_rank(code or 0)


def _main() -> None:
    try:
        app()
    except VlattnError as err:
        typer.echo(f"error: {' '.join(str(err).splitlines())}", err=True)  # one line, whatever the message
        sys.exit(2)
    except OSError as err:  # a write the command did not name itself (disk full, read-only): still one line
        if not is_write_error(err):
            raise
        typer.echo(f"error: {WriteError(err.filename or 'output', err)}", err=True)
        sys.exit(2)
    except TrainingInterrupted as stop:
        typer.echo(f"vlattn: {stop}", err=True)
        sys.exit(stop.exit_status)
    except KeyboardInterrupt:
        typer.echo("vlattn: interrupted (SIGINT)", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
