"""Training stages driven by a :class:`~vlattn.config.Config`: cross-entropy, then SCST.

Run directory layout::

    RUN_DIR/config.yaml            the resolved config of the run
    RUN_DIR/vocab.json             the vocabulary (also inside every checkpoint)
    RUN_DIR/metrics.jsonl          train/val records, appended (also across resumes)
    RUN_DIR/checkpoints/last/      model.safetensors, config.json, vocab.json, train_state.pt
    RUN_DIR/checkpoints/best/      the same, for the best validation CIDEr-D

A resumed run continues from ``checkpoints/last`` and may change training settings (more epochs, ...)
but not the model or the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils.data import Dataset

from vlattn.config import Config, Spec, config_to_dict, save_config
from vlattn.data.captioning import collate_eval, collate_train
from vlattn.data.vocab import Vocabulary
from vlattn.errors import ConfigError, VlattnError
from vlattn.evaluation import decode_dataset, references_of, score_predictions
from vlattn.pipeline import CaptionData, build_model, build_optimizer, load_caption_data
from vlattn.training.checkpoint import load_checkpoint, load_weights
from vlattn.training.distributed import broadcast_parameters, init_distributed, pick_device
from vlattn.training.loop import Batch, LoopOptions, Objective, Trainer
from vlattn.training.schedules import build_schedule
from vlattn.training.scst import scst_objective
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


def check_resumable(cfg: Config, saved: Config) -> None:
    """A resumed run may change training/evaluation settings (e.g. more epochs), not the model or data."""
    for section in ("model", "data"):
        new, old = config_to_dict(cfg)[section], config_to_dict(saved)[section]
        changed = sorted(k for k in new if new[k] != old[k] and k != "num_workers")
        if changed:
            raise ConfigError(
                f"cannot resume: {section}.{changed[0]} is {new[changed[0]]!r} but the checkpoint has {old[changed[0]]!r}"
            )


@dataclass
class StagePlan:
    """What distinguishes one stage from another: objective, data, schedule and length."""

    name: str
    objective: Callable[[Config, CaptionData, torch.device], Objective]
    dataset: Callable[[Config, CaptionData], Dataset]
    collate: Callable[[list[Any]], Batch]
    schedule: Callable[[Config], Spec]
    epochs: Callable[[Config], int]
    batch_size: Callable[[Config], int]


def run_stage(
    plan: StagePlan, cfg: Config, run_dir: str | Path, *, resume: bool = False, device: str = "auto",
    init: str | Path | None = None,
) -> dict[str, float]:
    """Set up data, model (from ``init`` weights or a resume point), optimiser and loop; train; return val metrics."""
    run_dir = Path(run_dir)
    state = None
    vocab: Vocabulary | None = None
    weights: Path | str | None = init
    if resume:
        weights = run_dir / "checkpoints" / "last"
        checkpoint = load_checkpoint(weights, with_state=True)
        check_resumable(cfg, checkpoint.config)
        vocab, state = checkpoint.vocab, checkpoint.train_state
    elif (run_dir / "checkpoints").exists():
        raise VlattnError(f"{run_dir}: run directory already has checkpoints; pass --resume to continue it or choose another --out")
    elif init is not None:
        vocab = load_checkpoint(init).vocab
    ctx = init_distributed(torch.device("cuda") if torch.cuda.is_available() and device != "cpu" else torch.device("cpu"))
    dev = pick_device(device, ctx)
    torch.manual_seed(cfg.train.seed)
    data = load_caption_data(cfg.data, vocab)
    model = build_model(cfg, data.vocab, data.store.dim)
    if weights is not None:
        load_weights(model, weights)
    model.to(dev)
    broadcast_parameters(model, ctx)
    if ctx.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
        data.vocab.save(run_dir / "vocab.json")
    trainer = Trainer(
        model=model,
        optimizer=build_optimizer(model, cfg),
        schedule=build_schedule(plan.schedule(cfg), d_model=cfg.model.d_model),
        objective=plan.objective(cfg, data, dev),
        dataset=plan.dataset(cfg, data),
        collate=plan.collate,
        validate=make_validator(cfg, data, dev),
        run_dir=run_dir,
        config=cfg,
        vocab=data.vocab,
        options=LoopOptions(
            stage=plan.name,
            epochs=plan.epochs(cfg),
            batch_size=plan.batch_size(cfg),
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


XE = StagePlan(
    name="xe",
    objective=lambda cfg, data, dev: xe_objective(pad_id=data.vocab.PAD, label_smoothing=cfg.train.label_smoothing),
    dataset=lambda cfg, data: data.train_set(cfg.data),
    collate=collate_train,
    schedule=lambda cfg: cfg.train.schedule,
    epochs=lambda cfg: cfg.train.epochs,
    batch_size=lambda cfg: cfg.train.batch_size,
)


def _scst_objective(cfg: Config, data: CaptionData, device: torch.device) -> Objective:
    from vlattn.rewards import training_reward

    return scst_objective(
        reward=training_reward(data, mode=cfg.eval.cider_df_mode, include_eos=cfg.eval.reward_include_eos),
        vocab=data.vocab,
        sampling=cfg.train.scst_sampling,
        baseline=cfg.train.scst_baseline,
        num_samples=cfg.train.scst_samples,
        max_len=cfg.eval.max_len,
    )


SCST = StagePlan(
    name="scst",
    objective=_scst_objective,
    dataset=lambda cfg, data: data.eval_set("train", cfg.data),
    collate=collate_eval,
    schedule=lambda cfg: cfg.train.scst_schedule,
    epochs=lambda cfg: cfg.train.scst_epochs,
    batch_size=lambda cfg: cfg.train.scst_batch_size,
)


def train_xe(cfg: Config, run_dir: str | Path, **kwargs: Any) -> dict[str, float]:
    """Cross-entropy training (``init`` optionally warm-starts from another checkpoint's weights)."""
    return run_stage(XE, cfg, run_dir, **kwargs)


def train_scst(cfg: Config, run_dir: str | Path, *, init: str | Path | None = None, resume: bool = False,
               device: str = "auto") -> dict[str, float]:
    """Self-critical training with the CIDEr-D reward, starting from ``init`` (an XE checkpoint or run dir)."""
    if init is None and not resume:
        raise VlattnError("SCST starts from a trained model: pass --init CHECKPOINT (e.g. the XE run directory)")
    return run_stage(SCST, cfg, run_dir, init=init, resume=resume, device=device)


STAGES: dict[str, Callable[..., dict[str, float]]] = {"xe": train_xe, "scst": train_scst}
