"""Training stages driven by a :class:`~vlattn.config.Config`: cross-entropy, then SCST.

Run directory layout::

    RUN_DIR/config.yaml            the resolved config of the run
    RUN_DIR/vocab.json             the vocabulary (also inside every checkpoint)
    RUN_DIR/metrics.jsonl          train/val records, appended (also across resumes)
    RUN_DIR/checkpoints/last/      model.safetensors, config.json, vocab.json, train_state.pt
    RUN_DIR/checkpoints/best/      the same, for the best validation CIDEr-D
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from vlattn.config import Config, config_to_dict, save_config
from vlattn.data.captioning import collate_train
from vlattn.errors import ConfigError, VlattnError
from vlattn.evaluation import decode_dataset, references_of, score_predictions
from vlattn.pipeline import CaptionData, build_model, build_optimizer, load_caption_data
from vlattn.training.checkpoint import load_checkpoint, load_weights
from vlattn.training.distributed import DistContext, broadcast_parameters, init_distributed, pick_device
from vlattn.training.loop import LoopOptions, Trainer
from vlattn.training.schedules import build_schedule
from vlattn.training.xe import xe_objective

VAL_METRICS = ("BLEU", "ROUGE_L", "CIDEr")


def make_validator(cfg: Config, data: CaptionData, device: torch.device) -> Callable[[torch.nn.Module], dict[str, float]]:
    """Validation: decode the val split (greedy or beam per ``train.val_decoding``) and score it."""
    dataset = data.eval_set("val", cfg.data, cfg.train.val_max_images)
    references = references_of(dataset)
    beam = cfg.eval.beam_size if cfg.train.val_decoding == "beam" else 1

    def validate(model: torch.nn.Module) -> dict[str, float]:
        predictions = decode_dataset(
            model, dataset, data.vocab, beam_size=beam, max_len=cfg.eval.max_len, batch_size=cfg.eval.batch_size,
            device=device,
        )
        report = score_predictions(
            predictions, references, collapse_repeats=cfg.eval.collapse_repeats, metrics=VAL_METRICS,
            tokenizer_backend="python",
        )
        return {k: float(v) for k, v in report["scores"].items()}

    return validate


def _resume_point(run_dir: Path, resume: bool) -> Path | None:
    """The checkpoint to resume from, or None for a new run (refusing to overwrite an existing one)."""
    if resume:
        return run_dir / "checkpoints" / "last"
    if (run_dir / "checkpoints").exists():
        raise VlattnError(f"{run_dir}: run directory already has checkpoints; pass --resume to continue it or choose another --out")
    return None


def check_resumable(cfg: Config, saved: Config) -> None:
    """A resumed run may change training/evaluation settings (e.g. more epochs), not the model or data."""
    for section in ("model", "data"):
        new, old = config_to_dict(cfg)[section], config_to_dict(saved)[section]
        changed = sorted(k for k in new if new[k] != old[k] and k != "num_workers")
        if changed:
            raise ConfigError(
                f"cannot resume: {section}.{changed[0]} is {new[changed[0]]!r} but the checkpoint has {old[changed[0]]!r}"
            )


def train_xe(
    cfg: Config, run_dir: str | Path, *, resume: bool = False, device: str = "auto", init: str | Path | None = None
) -> dict[str, float]:
    """Cross-entropy training with validation each epoch; returns the last validation metrics.

    ``init`` warm-starts a new run from another checkpoint's weights (same architecture and vocabulary).
    """
    run_dir = Path(run_dir)
    resume_from = _resume_point(run_dir, resume)
    state = None
    vocab = None
    if resume_from is not None:
        checkpoint = load_checkpoint(resume_from, with_state=True)
        check_resumable(cfg, checkpoint.config)
        vocab, state = checkpoint.vocab, checkpoint.train_state
    elif init is not None:
        vocab = load_checkpoint(init).vocab
    ctx = init_distributed(torch.device("cuda") if torch.cuda.is_available() and device != "cpu" else torch.device("cpu"))
    dev = pick_device(device, ctx)
    torch.manual_seed(cfg.train.seed)
    data = load_caption_data(cfg.data, vocab)
    model = build_model(cfg, data.vocab, data.store.dim)
    if resume_from is not None or init is not None:
        load_weights(model, resume_from if resume_from is not None else init)
    model.to(dev)
    broadcast_parameters(model, ctx)
    if ctx.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
        data.vocab.save(run_dir / "vocab.json")
    trainer = Trainer(
        model=model,
        optimizer=build_optimizer(model, cfg),
        schedule=build_schedule(**vars(cfg.train.schedule), d_model=cfg.model.d_model),
        objective=xe_objective(pad_id=data.vocab.PAD, label_smoothing=cfg.train.label_smoothing),
        dataset=data.train_set(cfg.data),
        collate=collate_train,
        validate=make_validator(cfg, data, dev),
        run_dir=run_dir,
        config=cfg,
        vocab=data.vocab,
        options=LoopOptions(
            stage="xe",
            epochs=cfg.train.epochs,
            batch_size=cfg.train.batch_size,
            seed=cfg.train.seed,
            grad_clip=cfg.train.grad_clip,
            log_every=cfg.train.log_every,
            checkpoint_every=cfg.train.checkpoint_every,
            max_steps=cfg.train.max_steps,
            num_workers=cfg.data.num_workers,
        ),
        device=dev,
        ctx=ctx,
    )
    if state is not None:
        trainer.restore(state)
    return trainer.fit()


STAGES = {"xe": train_xe}
