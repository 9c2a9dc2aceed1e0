"""Roofline of decoding and training (issue 17): measured time over the time the run's FLOPs would take at this
machine's one-thread matrix-multiply rate at the model's own GEMM shapes.

Runs, for the Transformer (configs/transformer.yaml at 3+3 layers) and M2 (configs/m2.yaml), batch 10 images
of 50 regions x 2048-d, vocabulary 10201:

- beam search: beam 5, 20 steps, eval mode, no gradients, key/value caches;
- SCST step: train mode, beam 5 over 20 steps with gradients (``beam_search(grad=True)``), CIDEr-D reward
  (``CiderReward``, 5 references per image), mean baseline, SCST loss, backward, Adam update (the library's
  ``build_optimizer``);
- XE step: train mode, teacher-forced forward over 20 tokens, cross-entropy, backward, Adam update.

FLOPs are counted with ``torch.utils.flop_counter.FlopCounterMode``. The matmul rate is measured in the same
run: every ``mm``/``addmm``/``bmm``/``baddbmm`` the run dispatches is recorded (shape, strides, dtype; weights
kept distinct per parameter, so caches behave as in the model) and the recorded sequence is replayed alone;
rate = GEMM FLOPs / replay time. Bound = all counted FLOPs (attention included) / rate; ratio = time / bound.
One thread; each round runs every (run, model) once, followed by its replay, so a round's ratio uses the
rate measured next to it; medians over rounds. Writes "## Roofline" of benchmarks/RESULTS.md.

``--json PATH`` also writes the figures (per run and model: FLOPs, rate, bound, time, ratio) as JSON.
``--before PATH`` reads such a file from an earlier run (e.g. before an optimisation) and adds the ratio against
the bound of *its* FLOP count at today's rate, so FLOPs an optimisation removed count in its favour.
``--profile N`` adds where each run's time goes: one call under ``torch.profiler`` (self CPU time per operator),
grouped into GEMMs, fused attention and the rest, with the rest's N largest operators and the time outside
operators (Python, dispatch).
``--against DIR`` times another checkout's beam search side by side with this one's, in the same process: DIR's
``vlattn`` is imported as a renamed copy (``vlattn_against``, imports rewritten, in a temporary directory), its
models are built from the same seed (tokens and scores compared), and every round runs both, alternating which
goes first; the table gains the median over rounds of its time / this checkout's.

    .venv/bin/python benchmarks/bench_roofline.py [--repeats 5] [--no-write] [--quick] [--json PATH] [--before PATH]
        [--profile N] [--runs RUN ...] [--against DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from results import paired_ratio, parse_args, publish, sized
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from vlattn.config import load_config
from vlattn.data.vocab import Vocabulary
from vlattn.decoding import beam_search
from vlattn.io import atomic_write_text
from vlattn.metrics import CiderDocumentFrequency, CiderReward
from vlattn.models import build_captioner
from vlattn.models.profile import random_batch
from vlattn.training.optim import build_optimizer
from vlattn.training.scst import scst_objective
from vlattn.training.xe import xe_objective

VOCAB, REGIONS, FEATURES, BEAM, LENGTH = 10201, 50, 2048, 5, 20
RUNS = ("beam search", "SCST step", "XE step")
aten = torch.ops.aten
GEMMS = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm}
# FlopCounterMode knows the CUDA attention kernels but not the fused CPU one that eval-mode SDPA runs
# (training with attention dropout takes the math path: bmm + softmax, counted as GEMMs); same formulas
# (``__wrapped__``: the shape-level function, which FlopCounterMode wraps itself).
CPU_SDPA = {
    aten._scaled_dot_product_flash_attention_for_cpu:
        flop_registry[aten._scaled_dot_product_flash_attention].__wrapped__,
    aten._scaled_dot_product_flash_attention_for_cpu_backward:
        flop_registry[aten._scaled_dot_product_flash_attention_backward].__wrapped__,
}
Run = Callable[[], Any]


# The only code that calls the models: decoding and the library's training objectives.

def beam_run(model: nn.Module, batch: dict[str, Any], steps: int) -> Run:
    """Cached beam search (beam 5) in eval mode without gradients."""
    def run() -> object:
        model.eval()
        return beam_search(model, batch, bos=Vocabulary.BOS, eos=Vocabulary.EOS, beam_size=BEAM, max_len=steps)
    return run


def training_run(model: nn.Module, objective: Callable, batch: dict[str, Any]) -> Run:
    """One training step in train mode: ``objective`` (XE or SCST), backward, the library's Adam update
    (``build_optimizer``, as the train stages build it)."""
    optimizer = build_optimizer(model, (0.9, 0.999))
    for group in optimizer.param_groups:
        group["lr"] = 1e-6

    def run() -> None:
        model.train()
        loss, _ = objective(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return run


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """What a replay needs to rebuild a GEMM operand: shape, strides, dtype, and the parameter it views (if any).
    (A dataclass, not a NamedTuple: pytree functions would take a tuple apart.)"""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    parameter: int | None


class GemmRecorder(TorchDispatchMode):
    """Records every GEMM dispatched inside it, with its FLOPs (the formulas ``FlopCounterMode`` uses)."""

    def __init__(self, parameters: set[int]) -> None:
        super().__init__()
        self.parameters = parameters  # data pointers of the model's parameters
        self.calls: list[tuple[Any, tuple, dict]] = []
        self.flops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.overloadpacket in GEMMS:
            self.calls.append((func, tree_map(self._spec, args), tree_map(self._spec, kwargs)))
            self.flops += flop_registry[func.overloadpacket](*args, **kwargs, out_val=out)
        return out

    def _spec(self, value: Any) -> Any:
        if not isinstance(value, Tensor):
            return value
        pointer = value.data_ptr()
        return TensorSpec(tuple(value.shape), value.stride(), value.dtype, pointer if pointer in self.parameters else None)


def replay_seconds(calls: list[tuple[Any, tuple, dict]]) -> float:
    """Seconds to run the recorded GEMMs alone on random operands (one buffer per spec; parameters distinct).
    The buffers are built before the clock starts and freed on return, so only one replay's operands are ever
    held (holding all six beside the models got a full-size run killed for memory on the shared machine)."""
    buffers: dict[TensorSpec, Tensor] = {}

    def build(value: Any) -> Any:
        if not isinstance(value, TensorSpec):
            return value
        if value not in buffers:
            size = 1 + sum((n - 1) * s for n, s in zip(value.shape, value.stride) if n > 0)
            buffers[value] = torch.randn(size, dtype=value.dtype).as_strided(value.shape, value.stride)
        return buffers[value]

    plan = [(func, tree_map(build, args), tree_map(build, kwargs)) for func, args, kwargs in calls]

    def run() -> None:
        for func, args, kwargs in plan:
            func(*args, **kwargs)
    return seconds(run)


@dataclasses.dataclass
class Measured:
    """One (run, model): FLOPs (all, and those of fused CPU attention), the recorded GEMMs' FLOPs, and per-round
    times of the run and of its GEMM replay."""

    flops: int
    sdpa_flops: int
    gemm_flops: int
    calls: list[tuple[Any, tuple, dict]]  # the recorded GEMMs (GemmRecorder.calls)
    times: list[float] = dataclasses.field(default_factory=list)
    replay_times: list[float] = dataclasses.field(default_factory=list)

    def ratios(self, flops: int | None = None) -> list[float]:
        """Per round: time / (FLOPs / rate), rate = GEMM FLOPs / replay time; ``flops`` replaces the run's own
        count (e.g. an earlier version's)."""
        flops = self.flops if flops is None else flops
        return [t * self.gemm_flops / (flops * r) for t, r in zip(self.times, self.replay_times)]

    def figures(self) -> dict[str, float]:
        """The medians this benchmark reports, for ``--json``."""
        rate = self.gemm_flops / statistics.median(self.replay_times)
        return {"flops": self.flops, "sdpa_flops": self.sdpa_flops, "gemm_rate": rate, "bound": self.flops / rate,
                "time": statistics.median(self.times), "ratio": statistics.median(self.ratios())}


def measure(run: Run, model: nn.Module) -> Measured:
    """Count the FLOPs of ``run`` and record its GEMMs (two calls of ``run``; the first is also a warm-up)."""
    with FlopCounterMode(display=False, custom_mapping=CPU_SDPA) as counter:
        run()
    recorder = GemmRecorder({p.data_ptr() for p in model.parameters()})
    with recorder:
        run()
    per_op = counter.get_flop_counts()["Global"]
    sdpa = sum(per_op.get(op, 0) for op in CPU_SDPA)
    return Measured(counter.get_total_flops(), sdpa, recorder.flops, recorder.calls)


def seconds(run: Run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def build_models(package: str = "vlattn") -> dict[str, nn.Module]:
    """The Transformer of configs/transformer.yaml at 3+3 layers and M2 of configs/m2.yaml, seeded alike, built by
    ``package`` (this checkout's ``vlattn``, or another's under ``--against``)."""
    config = importlib.import_module(f"{package}.config")
    build = importlib.import_module(f"{package}.models").build_captioner
    configs = {
        "Transformer": config.load_config(
            "configs/transformer.yaml", ["model.encoder_layers=3", "model.decoder_layers=3"]
        ),
        "M2": config.load_config("configs/m2.yaml"),
    }
    models = {}
    for name, cfg in configs.items():
        torch.manual_seed(0)
        models[name] = build(cfg.model, VOCAB, pad_id=Vocabulary.PAD)
    return models


def import_against(checkout: Path, into: Path) -> str:
    """Import ``checkout``'s ``vlattn`` as the package ``vlattn_against`` (a copy under ``into`` with its absolute
    imports rewritten), beside this checkout's; returns the package name."""
    shutil.copytree(checkout / "vlattn", into / "vlattn_against", ignore=shutil.ignore_patterns("__pycache__"))
    for path in (into / "vlattn_against").rglob("*.py"):
        path.write_text(re.sub(r"\bvlattn(?=[. ]|$)", "vlattn_against", path.read_text(), flags=re.M))
    sys.path.insert(0, str(into))
    return importlib.import_module("vlattn_against").__name__


def against_runs(checkout: Path, into: Path, batch: dict[str, Any], steps: int) -> dict[str, Run]:
    """Model name -> beam search run of ``checkout``'s code (:func:`import_against`) at the same settings."""
    package = import_against(checkout, into)
    search = importlib.import_module(f"{package}.decoding").beam_search

    def run_of(model: nn.Module) -> Run:
        def run() -> object:
            model.eval()
            return search(model, batch, bos=Vocabulary.BOS, eos=Vocabulary.EOS, beam_size=BEAM, max_len=steps)
        return run
    return {name: run_of(model) for name, model in build_models(package).items()}


def same_beams(ours: Run, theirs: Run) -> str:
    """Whether two beam search runs return the same tokens, and their largest score difference."""
    with torch.no_grad():
        a, b = ours(), theirs()
    same = "identical" if torch.equal(a.tokens, b.tokens) else "DIFFERENT"
    return f"tokens {same}, scores within {(a.scores - b.scores).abs().max().item():.1e}"


def scst_reward(batch_size: int) -> Callable[[Tensor, list[int]], Tensor]:
    """CIDEr-D of token ids against 5 random references per image (document frequencies of those references)."""
    generator = torch.Generator().manual_seed(1)
    words = [f"w{i}" for i in range(VOCAB - 4)]
    refs = [[" ".join(words[j] for j in torch.randint(0, 300, (10,), generator=generator).tolist()) for _ in range(5)]
            for _ in range(batch_size)]
    scorer = CiderReward(CiderDocumentFrequency.build(refs), include_eos=False,
                         vocabulary=Vocabulary(words).itos)

    def reward(tokens: Tensor, image_ids: list[int]) -> Tensor:
        return torch.from_numpy(scorer(tokens.numpy(), [refs[i] for i in image_ids])).float()
    return reward


def time_shares(run: Run, top: int) -> str:
    """Where one call of ``run`` spends its time: shares of the wall time in GEMMs, fused attention (forward and
    backward), the ``top`` largest other operators (self CPU time under ``torch.profiler``), the other operators
    together, and outside any operator (Python, dispatch, profiler overhead)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        wall = seconds(run) * 1e6  # microseconds, as the profiler
    self_times = {event.key: event.self_cpu_time_total for event in profiler.key_averages()}
    gemm_names = {f"aten::{op.__name__}" for op in GEMMS}
    sdpa_names = {f"aten::{op.__name__}" for op in CPU_SDPA}
    gemm = sum(t for name, t in self_times.items() if name in gemm_names)
    sdpa = sum(t for name, t in self_times.items() if name in sdpa_names)
    rest = sorted(((t, name) for name, t in self_times.items() if name not in gemm_names | sdpa_names), reverse=True)
    largest = ", ".join(f"`{name.removeprefix('aten::')}` {100 * t / wall:.1f}" for t, name in rest[:top])
    others = sum(t for t, _ in rest[top:])
    outside = wall - gemm - sdpa - sum(t for t, _ in rest)
    return (f"{100 * gemm / wall:.1f} | {100 * sdpa / wall:.1f} | {largest} | {100 * others / wall:.1f} | "
            f"{100 * outside / wall:.1f}")


def extra_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--before", type=Path, metavar="PATH",
                        help="a --json file of an earlier run: add time / bound at its FLOP count")
    parser.add_argument("--profile", type=int, metavar="N", default=0,
                        help="add a table of where each run's time goes, naming the N largest other operators")
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS), metavar="RUN",
                        help=f"measure only these runs (of {', '.join(map(repr, RUNS))}; default all)")
    parser.add_argument("--against", type=Path, metavar="DIR",
                        help="also time DIR's beam search (another checkout) side by side: its time / this one's")


def earlier_flops(path: Path | None) -> dict[tuple[str, str], int]:
    """(run, model) -> FLOPs of an earlier ``--json`` file (empty without one)."""
    if path is None:
        return {}
    return {(row["run"], row["model"]): row["flops"] for row in json.loads(path.read_text())["rows"]}


def main() -> None:
    args = parse_args(__doc__, repeats=5, extra=extra_options)
    before = earlier_flops(args.before)
    torch.set_num_threads(1)
    batch_size, steps = sized(args, 10, 2), sized(args, LENGTH, 5)
    batch: dict[str, Any] = random_batch(batch_size, REGIONS, steps, FEATURES, VOCAB)
    batch["image_ids"] = torch.arange(batch_size)
    vocab = Vocabulary([f"w{i}" for i in range(VOCAB - 4)])
    objectives = {
        "SCST step": scst_objective(reward=scst_reward(batch_size), vocab=vocab, num_samples=BEAM, max_len=steps),
        "XE step": xe_objective(pad_id=Vocabulary.PAD),
    }
    models = build_models()
    runs: dict[tuple[str, str], Run] = {}
    for name, model in models.items():
        runs[("beam search", name)] = beam_run(model, batch, steps)
        for task, objective in objectives.items():
            runs[(task, name)] = training_run(model, objective, batch)
    ran = runs[("beam search", "M2")]().tokens.shape[-1]  # words decoded (20 unless every beam ended early)
    runs = {key: run for key, run in runs.items() if key[0] in args.runs}
    measured = {key: measure(run, models[key[1]]) for key, run in runs.items()}
    scratch = None if args.against is None else tempfile.TemporaryDirectory()  # the renamed copy, removed at exit
    theirs = {} if scratch is None else against_runs(args.against.resolve(), Path(scratch.name), batch, steps)
    compared = {key: same_beams(run, theirs[key[1]]) for key, run in runs.items() if key[0] == "beam search" and theirs}
    their_times: dict[tuple[str, str], list[float]] = {key: [] for key in compared}
    for round_ in range(args.repeats):
        for key, run in runs.items():
            if key in compared and round_ % 2:
                their_times[key].append(seconds(theirs[key[1]]))
            measured[key].times.append(seconds(run))
            if key in compared and not round_ % 2:
                their_times[key].append(seconds(theirs[key[1]]))
            measured[key].replay_times.append(replay_seconds(measured[key].calls))
    rows, figures = [], []
    for (task, name), m in measured.items():
        f = m.figures()
        figures.append({"run": task, "model": name, **f})
        earlier = before.get((task, name))
        versus = (f" {earlier / 1e9:.1f} | **{statistics.median(m.ratios(earlier)):.2f}x** |"
                  if earlier else " - | - |") if before else ""
        if theirs:
            versus += (f" {paired_ratio(their_times[(task, name)], m.times):.3f} ({compared[(task, name)]}) |"
                       if (task, name) in compared else " - |")
        rows.append(
            f"| {task} | {name} | {(m.flops - m.sdpa_flops) / 1e9:.1f} | {m.sdpa_flops / 1e9:.2f} | "
            f"{f['gemm_rate'] / 1e9:.0f} | {f['bound']:.2f} | {f['time']:.2f} | **{f['ratio']:.2f}x** |{versus}"
        )
    if args.json is not None:
        settings = {"batch": batch_size, "steps": steps, "ran": ran, "repeats": args.repeats,
                    "torch": torch.__version__}
        atomic_write_text(args.json, json.dumps({"settings": settings, "rows": figures}, indent=1) + "\n")
    extra_head = f" GFLOP of {args.before.name} | time / bound at its FLOPs |" if before else ""
    extra_head += f" time of {args.against} / this checkout's, paired rounds |" if theirs else ""
    body = f"""Batch {batch_size}, {REGIONS} regions x {FEATURES}-d, d=512, 8 heads, FFN 2048, 3+3 layers, vocabulary {VOCAB};
Transformer = configs/transformer.yaml with 3+3 layers, M2 = configs/m2.yaml. Beam search: beam {BEAM}, {steps} steps
(ran {ran}), eval mode, K/V caches. SCST step: train mode, beam {BEAM} with gradients, CIDEr-D reward, mean baseline,
loss, backward, Adam. XE step: train mode, {steps} tokens, cross-entropy, backward, Adam. Adam = the train stages'
(`build_optimizer`: PyTorch's fused kernel).
FLOPs: `FlopCounterMode` (its own registry: GEMMs, and in training the attention's math-path bmm), plus the fused
CPU SDPA kernel of eval-mode attention, which its registry lacks (counted with its CUDA-kernel formula). Rate: the
run's own GEMM sequence (mm/addmm/bmm/baddbmm, same shapes and strides, one buffer per weight) replayed alone,
GEMM FLOPs / replay time, measured next to each run. Bound = all FLOPs / rate. `torch.set_num_threads(1)`, {args.repeats} rounds (every run then its replay), medians; ratio =
median over rounds of time / bound. torch {torch.__version__}, shared 2-CPU machine.

| run | model | GFLOP (`FlopCounterMode`) | + GFLOP fused SDPA | GEMM rate (GFLOP/s) | bound (s) | time (s) | time / bound |{extra_head}
|---|---|---|---|---|---|---|---|{"---|---|" if before else ""}{"---|" if theirs else ""}
{chr(10).join(rows)}"""
    if args.profile:
        shares = "\n".join(f"| {task} | {name} | {time_shares(run, args.profile)} |"
                           for (task, name), run in runs.items())
        body += f"""

Where the time goes (`--profile {args.profile}`: one more call of each run under `torch.profiler`, self CPU time per
operator as % of that call's wall time; GEMMs = mm/addmm/bmm/baddbmm; fused attention = the CPU SDPA kernel,
forward and backward; outside operators = Python, dispatch and the profiler's own overhead):

| run | model | GEMMs % | fused attention % | largest other operators (%) | other operators % | outside operators % |
|---|---|---|---|---|---|---|
{shares}"""
    publish("Roofline", body, args)


if __name__ == "__main__":
    main()
