"""Implementations behind the CLI commands that are not training stages (eval, caption, profile)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from vlattn.config import Config
from vlattn.data.captioning import CaptionEvalSet
from vlattn.data.features import open_store
from vlattn.data.karpathy import ImageEntry
from vlattn.errors import DataError
from vlattn.evaluation import decode_dataset, references_of, score_predictions, write_predictions
from vlattn.io import atomic_write_text
from vlattn.pipeline import build_model, load_caption_data
from vlattn.training.checkpoint import Checkpoint, load_checkpoint, load_weights
from vlattn.training.distributed import pick_device


def _load_model(checkpoint: Checkpoint, store_dim: int, device: torch.device) -> torch.nn.Module:
    model = build_model(checkpoint.config, checkpoint.vocab, store_dim)
    load_weights(model, checkpoint)
    return model.to(device).eval()


def _decode(
    model: torch.nn.Module, dataset: CaptionEvalSet, checkpoint: Checkpoint, beam: int, device: torch.device
) -> dict[int, str]:
    """Decode ``dataset`` with the checkpoint's evaluation settings (max length, length penalty, batch size)."""
    cfg = checkpoint.config.eval
    return decode_dataset(
        model, dataset, checkpoint.vocab, beam_size=beam, max_len=cfg.max_len, length_penalty=cfg.length_penalty,
        batch_size=cfg.batch_size, device=device,
    )


def output_dir(checkpoint: Checkpoint) -> Path:
    """Where evaluation outputs go: ``RUN_DIR/eval`` for a checkpoint inside a run dir."""
    parent = checkpoint.path.parent
    return (parent.parent if parent.name == "checkpoints" else checkpoint.path) / "eval"


def run_eval(
    checkpoint_path: str | Path,
    *,
    split: str = "test",
    data_root: str | Path | None = None,
    beam_size: int | None = None,
    device: str = "auto",
) -> dict[str, Any]:
    """Decode ``split`` with beam search, score it, write predictions and metrics; returns the report."""
    checkpoint = load_checkpoint(checkpoint_path)
    cfg: Config = checkpoint.config
    if data_root is not None:
        cfg.data.root = str(data_root)
    dev = pick_device(device)
    data = load_caption_data(cfg.data, checkpoint.vocab)
    if split not in data.entries:
        raise DataError(f"unknown split {split!r}; valid: {', '.join(data.entries)}")
    model = _load_model(checkpoint, data.store.dim, dev)
    dataset = data.eval_set(split, cfg.data)
    beam = beam_size if beam_size is not None else cfg.eval.beam_size
    predictions = _decode(model, dataset, checkpoint, beam, dev)
    scores = score_predictions(predictions, references_of(dataset), collapse_repeats=cfg.eval.collapse_repeats)
    out = output_dir(checkpoint)
    write_predictions(out / f"{split}_predictions.json", predictions)
    report = {
        "split": split,
        "checkpoint": str(checkpoint.path),
        "images": len(predictions),
        "beam_size": beam,
        "max_len": cfg.eval.max_len,
        "collapse_repeats": cfg.eval.collapse_repeats,
        **scores,
        "predictions": str(out / f"{split}_predictions.json"),
    }
    atomic_write_text(out / f"{split}_metrics.json", json.dumps(report, indent=1))
    return report


def format_report(report: dict[str, Any]) -> str:
    """Human-readable metrics table of :func:`run_eval`'s report."""
    lines = [f"{report['split']}: {report['images']} images, beam {report['beam_size']} ({report['checkpoint']})"]
    for name, value in report["scores"].items():
        lines.append(f"  {name:<8} {value:.4f}")
    for name, reason in report.get("unavailable", {}).items():
        lines.append(f"  {name:<8} not computed: {reason}")
    return "\n".join(lines)


def run_caption(
    checkpoint_path: str | Path,
    features: str | Path,
    ids: list[int] | None,
    *,
    beam_size: int | None = None,
    device: str = "auto",
) -> list[dict[str, Any]]:
    """Caption the given image ids (default: all) of a feature store; COCO results rows."""
    checkpoint = load_checkpoint(checkpoint_path)
    cfg = checkpoint.config
    store = open_store(features)
    wanted = ids if ids is not None else store.ids()
    missing = [i for i in wanted if i not in store]
    if missing:
        raise DataError(f"image ids not in the feature store: {missing[:10]}", path=features)
    dev = pick_device(device)
    model = _load_model(checkpoint, store.dim, dev)
    entries = [ImageEntry(image_id=i, split="test", filename="", captions=[], raw=[]) for i in wanted]
    beam = beam_size if beam_size is not None else cfg.eval.beam_size
    predictions = _decode(model, CaptionEvalSet(entries, store, cfg.data.max_regions), checkpoint, beam, dev)
    return [{"image_id": i, "caption": predictions[i]} for i in wanted]


def run_profile(cfg: Config, *, vocab_size: int, batch: int, regions: int, length: int, repeats: int) -> dict[str, Any]:
    """Parameters (total, per top-level module), FLOPs of a training and a decoding step, and latency."""
    from vlattn.models import build_captioner
    from vlattn.models.profile import count_parameters, flops_decode_step, flops_train_step, latency

    model = build_captioner(cfg.model, vocab_size)
    shapes = dict(batch=batch, regions=regions, length=length, feature_dim=cfg.model.feature_dim, vocab=vocab_size)
    model.train()
    train_flops = flops_train_step(model, **shapes)
    model.eval()
    decode_flops = flops_decode_step(model, **shapes)
    model.train()
    return {
        "model": cfg.model.kind,
        "shapes": shapes,
        "threads": torch.get_num_threads(),
        "parameters": count_parameters(model),
        "flops": {"train_step": train_flops, "decode_step": decode_flops},
        "latency_ms": latency(model, repeats=repeats, **shapes),
    }


def format_profile(report: dict[str, Any]) -> str:
    """Human-readable table of :func:`run_profile`'s report."""
    shapes = ", ".join(f"{k}={v}" for k, v in report["shapes"].items())
    lines = [f"{report['model']} ({shapes}; {report['threads']} threads)", "trainable parameters:"]
    lines += [f"  {name:<12} {count:>14,}" for name, count in report["parameters"].items()]
    lines.append("FLOPs:")
    lines += [f"  {name:<12} {count / 1e9:>14.3f} G" for name, count in report["flops"].items()]
    lines.append("latency (median):")
    lines += [f"  {name:<14} {ms:>12.1f} ms" for name, ms in report["latency_ms"].items()]
    return "\n".join(lines)
