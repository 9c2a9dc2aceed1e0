"""Decoder speed against a git revision: the same runs on this tree's vlattn and on vlattn at git revision REV
(default ``main``), interleaved in one run.

Each side is a worker process whose ``vlattn`` (and presets) come from its own tree (REV extracted with
``git archive``); both build the same seeded models — the Transformer of vlattn/presets/transformer.yaml at 3+3 layers and
M2 of vlattn/presets/m2.yaml, each side with its own tree's presets and defaults — and the same random batch of 10 images,
50 regions x 2048-d, vocabulary 10201. Runs:

- beam search: beam 5, 20 steps, eval mode, no gradients, key/value caches;
- SCST step: train mode, beam 5 over 20 steps with gradients (``scst_objective``, mean baseline), backward, Adam;
  the reward is a fixed function of the tokens (the count of distinct words, the same on both sides), so the
  comparison is the model side's (benchmarks/bench_roofline.py times the CIDEr-D reward);
- XE step: train mode, 20 tokens, cross-entropy (``xe_objective``), backward, Adam.

Adam is each side's ``build_optimizer`` (the train stages' optimiser).

One torch thread per worker; every round runs each (run, model) on both sides in alternating order; medians and
the median of the per-round before/after ratios. The beam searches' tokens and scores of both sides are compared,
and the training runs' losses (in eval mode, so without dropout, before any update).

    .venv/bin/python benchmarks/bench_decoder_speed.py [--baseline REV] [--only "beam search"] [--repeats 5]
        [--no-write] [--quick]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VOCAB, REGIONS, FEATURES, BEAM, LENGTH, BATCH = 10201, 50, 2048, 5, 20, 10
RUNS = ("beam search", "SCST step", "XE step")
MODELS = ("Transformer", "M2")


# --- the worker: runs on one tree's vlattn ------------------------------------------------------------------------


def worker(root: Path, quick: bool, only: str | None) -> None:
    """Build the models and runs, then answer ``run|model`` lines with the seconds taken (and beams' outputs)."""
    import torch

    import vlattn
    from vlattn.config import load_config
    from vlattn.data.vocab import Vocabulary
    from vlattn.decoding import beam_search
    from vlattn.models import build_captioner
    from vlattn.models.profile import random_batch
    from vlattn.training.optim import build_optimizer
    from vlattn.training.scst import scst_objective
    from vlattn.training.xe import xe_objective

    assert Path(vlattn.__file__).resolve().is_relative_to(root.resolve()), vlattn.__file__
    torch.set_num_threads(1)
    batch_size, steps = (2, 5) if quick else (BATCH, LENGTH)
    batch: dict[str, Any] = random_batch(batch_size, REGIONS, steps, FEATURES, VOCAB)
    batch["image_ids"] = torch.arange(batch_size)
    vocab = Vocabulary([f"w{i}" for i in range(VOCAB - 4)])

    def distinct_words(tokens: torch.Tensor, image_ids: list[int]) -> torch.Tensor:
        return torch.tensor([float(len(set(row.tolist()) - {0, 2})) for row in tokens])

    objectives = {
        "SCST step": scst_objective(reward=distinct_words, vocab=vocab, num_samples=BEAM, max_len=steps),
        "XE step": xe_objective(pad_id=Vocabulary.PAD),
    }
    configs = {
        "Transformer": load_config(preset(root, "transformer"), ["model.encoder_layers=3", "model.decoder_layers=3"]),
        "M2": load_config(preset(root, "m2")),
    }
    runs: dict[str, Callable[[], Any]] = {}
    losses: dict[str, Callable[[], float]] = {}  # eval-mode loss of each training run, before any update
    for name, cfg in configs.items():
        torch.manual_seed(0)
        model = build_captioner(cfg.model, VOCAB, pad_id=Vocabulary.PAD)
        optimizer = build_optimizer(model, (0.9, 0.999))  # the side's own optimiser, as its train stages build it
        for group in optimizer.param_groups:
            group["lr"] = 1e-6

        def beam(model=model) -> Any:
            model.eval()
            with torch.no_grad():
                return beam_search(model, batch, bos=Vocabulary.BOS, eos=Vocabulary.EOS, beam_size=BEAM, max_len=steps)

        def train(objective, model=model, optimizer=optimizer) -> None:
            model.train()
            loss, _ = objective(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        def eval_loss(objective, model=model) -> float:
            model.eval()  # no dropout: both sides compute the same function of the same weights
            with torch.no_grad():
                return float(objective(model, batch)[0])

        runs[f"beam search|{name}"] = beam
        for run, objective in objectives.items():
            runs[f"{run}|{name}"] = lambda train=train, objective=objective: train(objective)
            losses[f"{run}|{name}"] = lambda eval_loss=eval_loss, objective=objective: eval_loss(objective)
    runs = {key: run for key, run in runs.items() if only is None or key.startswith(only)}
    outputs = {key: runs[key]() for key in runs if key.startswith("beam")}  # before any update; also a warm-up
    loss_values = {key: losses[key]() for key in runs if key in losses}  # before any update
    for key, run in runs.items():
        if not key.startswith("beam"):
            run()  # warm-up
    beams = {key: {"tokens": out.tokens.tolist(), "scores": out.scores.tolist()} for key, out in outputs.items()}
    print(json.dumps({"beams": beams, "losses": loss_values}), flush=True)
    for line in sys.stdin:
        start = time.perf_counter()
        runs[line.strip()]()
        print(time.perf_counter() - start, flush=True)


# --- the driver -----------------------------------------------------------------------------------------------------


class Side:
    """A worker process on the tree at ``root``."""

    def __init__(self, root: Path, quick: bool, only: str | None) -> None:
        env = {**os.environ, "PYTHONPATH": str(root)}
        command = [sys.executable, __file__, "--worker", str(root), *(["--quick"] if quick else []),
                   *(["--only", only] if only else [])]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                        cwd=str(root))
        self.outputs = json.loads(self.process.stdout.readline())  # beams' tokens/scores, eval-mode losses

    def time(self, key: str) -> float:
        self.process.stdin.write(key + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:  # e.g. killed by the kernel's out-of-memory killer (each worker holds two models + Adam)
            raise SystemExit(f"the worker on {self.process.args[3]} ended (exit status {self.process.wait()}) during {key!r}")
        return float(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def preset(root: Path, name: str) -> str | Path:
    """Preset ``name`` of the tree at ``root``: its top-level ``configs/NAME.yaml`` in a tree from before the presets
    were package data, else the name (resolved by that tree's own ``vlattn``)."""
    old = root / "configs" / f"{name}.yaml"
    return old if old.is_file() else name


def extract(revision: str, into: Path) -> Path:
    """``vlattn/`` (and ``configs/`` where the revision has one) of git ``revision`` under ``into``."""
    archive = into / "tree.tar"
    has_configs = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{revision}:configs"],
                                 capture_output=True).returncode == 0
    paths = ["vlattn", "configs"] if has_configs else ["vlattn"]
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), revision, *paths], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into


def compare_outputs(before: dict, after: dict) -> str:
    """Per beam search: identical tokens? largest score difference; per training run: the eval-mode losses."""
    parts = []
    for key, beams in before["beams"].items():
        same = beams["tokens"] == after["beams"][key]["tokens"]
        diff = max(abs(a - b) for ra, rb in zip(beams["scores"], after["beams"][key]["scores"]) for a, b in zip(ra, rb))
        parts.append(f"beam search {key.split('|')[1]}: tokens identical {same}, largest score difference {diff:.1e}")
    for key, loss in before["losses"].items():
        parts.append(f"{key.replace('|', ' ')} loss (eval mode) {loss:.6f} before, {after['losses'][key]:.6f} after")
    return "; ".join(parts)


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from results import parse_args, publish

    command = list(sys.argv)
    # --baseline REV (the git revision of the 'before' side, default main) and --only RUN (one run, e.g. "beam
    # search") are taken out before the common options
    own = {"--baseline": "main", "--only": None}
    for option in own:
        if option in sys.argv:
            at = sys.argv.index(option)
            own[option] = sys.argv[at + 1]
            del sys.argv[at : at + 2]
    args = parse_args(__doc__, repeats=5)
    (args.baseline, args.only), sys.argv = own.values(), command
    revision = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.baseline], check=True,
                              capture_output=True, text=True).stdout.strip()
    here = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"before": Side(extract(args.baseline, Path(tmp)), args.quick, args.only),
                 "after": Side(REPO, args.quick, args.only)}
        times: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
        keys = [f"{run}|{model}" for run in RUNS for model in MODELS if args.only in (None, run)]
        for round_ in range(args.repeats):
            for i, key in enumerate(keys):
                order = ("before", "after") if (round_ + i) % 2 == 0 else ("after", "before")
                for side in order:
                    times[side].setdefault(key, []).append(sides[side].time(key))
        compared = compare_outputs(sides["before"].outputs, sides["after"].outputs)
        for side in sides.values():
            side.close()
    rows = []
    for key in keys:
        before, after = times["before"][key], times["after"][key]
        paired = statistics.median(b / a for b, a in zip(before, after))
        run, model = key.split("|")
        rows.append(f"| {run} | {model} | {statistics.median(before):.3f} | {statistics.median(after):.3f} | "
                    f"**{paired:.2f}x** |")
    body = f"""Before = `{revision}` (`--baseline {args.baseline}`), after = `{here}` (this tree), each in its own worker process
(one torch thread), every (run, model) timed on both sides in alternating order in each of {args.repeats} rounds.
Batch {BATCH if not args.quick else 2}, {REGIONS} regions x {FEATURES}-d, vocabulary {VOCAB}; Transformer = vlattn/presets/transformer.yaml
at 3+3 layers, M2 = vlattn/presets/m2.yaml, each side with its own presets (after: no attention-weight or embedding dropout
by default). Beam search: beam {BEAM}, {LENGTH} steps, eval mode; SCST step: beam {BEAM} with gradients, a fixed
token-count reward, mean baseline, backward, Adam; XE step: {LENGTH} tokens, backward, Adam. Adam = each side's
`build_optimizer` (after: PyTorch's fused kernel).

| run | model | before (s, median) | after (s, median) | before / after (median of rounds) |
|---|---|---|---|---|
{chr(10).join(rows)}

Outputs before vs after (same seeded weights): {compared}."""
    publish("Decoder speed against a git revision", body, args)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(Path(sys.argv[2]), "--quick" in sys.argv, sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None)
    else:
        main()
