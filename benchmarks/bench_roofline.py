"""Roofline of decoding and training: measured time over the time the run's FLOPs would take at this
machine's one-thread matrix-multiply rate at the model's own GEMM shapes.

Runs, for the Transformer (vlattn/presets/transformer.yaml at 3+3 layers) and M2 (vlattn/presets/m2.yaml), batch 10 images
of 50 regions x 2048-d, vocabulary 10201:

- beam search: beam 5, 20 steps, eval mode, no gradients, key/value caches;
- SCST step: train mode, beam 5 over 20 steps with gradients (``beam_search(grad=True)``), CIDEr-D reward
  (``CiderReward``, 5 references per image), mean baseline, SCST loss, backward, Adam update (the library's
  ``build_optimizer``);
- XE step: train mode, teacher-forced forward over 20 tokens, cross-entropy, backward, Adam update.

FLOPs are counted with ``torch.utils.flop_counter.FlopCounterMode`` (plus the fused CPU attention kernel and
oneDNN's linear, which its registry lacks: the CUDA kernel's formula and addmm's, 2 x rows x in x out). The matmul
rate is measured in the same run: every GEMM the run dispatches — ``mm``/``addmm``/``bmm``/``baddbmm`` and oneDNN's
linear (``mkldnn._linear_pointwise``, ``--packed-output``) — is recorded (shape, strides, dtype; weights kept
distinct, so caches behave as in the model) and the recorded sequence is replayed alone, with two bounds:

- plain: every GEMM as aten's, oneDNN's linear as the ``addmm``/``mm`` that ``nn.Linear`` runs (x @ W.t() + b) — the
  issue's reference ("the one-thread matrix-multiply rate this machine reaches at the model's own shapes", which it
  measured with torch's GEMMs);
- best kernel (strict): each product by a weight at the faster of aten's GEMM and oneDNN's linear on the weight
  packed once. A second replay of the sequence runs every product x @ W.t() (+ b) whose W is a weight as oneDNN's
  linear on a packed copy of W (reordered before the clock starts, one per weight), everything else as recorded;
  the two replays alternate stretch by stretch (32 calls), so a load change on the shared machine hits both alike,
  and each call is timed. Per shape of such products (rows, in, out, bias) the faster replay's total over
  the shape's calls counts; products by activations (bmm/baddbmm, attention) count the plain replay's time.
  Weights: the model's parameters, tensors computed from parameters alone while they live (self-attention's
  joined query/key/value projection, built once per search), and oneDNN's packed copies. Taking the faster of two
  noisy timings per shape leans this bound low, i.e. stricter.

rate = GEMM FLOPs / replay time; bound = all counted FLOPs (attention included) / rate; ratio = time / bound.
One thread; each round runs every (run, model) once, followed by its two replays (alternating which starts),
so a round's ratio uses the rates measured next to it; medians over rounds. The output also gives, per shape of
product by a weight, its rate as aten's GEMM and as oneDNN's linear in the replays. Writes "## Roofline" of
benchmarks/RESULTS.md.

``--packed-output``: this checkout's beam search decodes through ``vlattn.decoding.PackedOutput`` (the vocabulary
projection as oneDNN's linear on its weight packed once). It changes only beam search: SCST and XE call the models
themselves (the same objects: a training step changes the weights, so the next search repacks the output weight
once, inside its timed call).
``--json PATH`` also writes the figures (per run and model: FLOPs, rate, bound, time, ratio — plain —, and
best_rate, best_bound, best_ratio) as JSON.
``--before PATH`` reads such a file from an earlier run (e.g. before an optimisation) and adds the ratio against
the bound of *its* FLOP count at today's rate, so FLOPs an optimisation removed count in its favour.
``--profile N`` adds where each run's time goes: one call under ``torch.profiler`` (self CPU time per operator),
grouped into GEMMs (oneDNN's linear included), fused attention and the rest, with the rest's N largest operators
and the time outside operators (Python, dispatch).
``--against DIR`` times another checkout's beam search side by side with this one's, in the same process: DIR's
``vlattn`` is imported as a renamed copy (``vlattn_against``, imports rewritten, in a temporary directory), its
models are built from the same seed (tokens and scores compared), and every round runs both, alternating which
goes first; the table gains the median over rounds of its time / this checkout's, and its time over this
checkout's two bounds (the same GEMMs: oneDNN's linear replays as the addmm it replaces; at ``--before``'s FLOPs
if given). With ``--packed-output`` its models stay as DIR builds them, so the paired ratio measures the change;
``--against-packed-output`` has DIR's beam search pack its output layer too, the way DIR does it (its
``decoding.PackedOutput``, or ``layers.packed.use_packed_output`` in a checkout from before that wrapper).

    .venv/bin/python benchmarks/bench_roofline.py [--repeats 5] [--no-write] [--quick] [--json PATH] [--before PATH]
        [--profile N] [--runs RUN ...] [--against DIR] [--packed-output] [--against-packed-output]
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
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from results import paired_ratio, parse_args, publish, sized
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import FlopCounterMode, flop_registry, shape_wrapper

from vlattn.data.vocab import Vocabulary
from vlattn.decoding import PackedOutput, beam_search
from vlattn.io import atomic_write_text
from vlattn.layers.packed import ONEDNN_LINEAR, PACKED_ROWS
from vlattn.metrics import CiderDocumentFrequency, CiderReward
from vlattn.models.profile import FLOP_FORMULAS, SDPA_CPU_FLOPS, onednn_linear_flops, random_batch
from vlattn.training.optim import build_optimizer
from vlattn.training.scst import scst_objective
from vlattn.training.xe import xe_objective

VOCAB, REGIONS, FEATURES, BEAM, LENGTH = 10201, 50, 2048, 5, 20
RUNS = ("beam search", "SCST step", "XE step")
aten = torch.ops.aten
GEMMS = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm}
# oneDNN's linear on a weight reordered once (vlattn.layers.packed.PackedWeight, ``--packed-output``): a GEMM too
LINEAR = torch.ops.mkldnn._linear_pointwise if ONEDNN_LINEAR else None
REORDER = torch.ops.mkldnn._reorder_linear_weight if ONEDNN_LINEAR else None


linear_flop = onednn_linear_flops  # FlopCounterMode lacks oneDNN's linear and the fused CPU attention kernel
CPU_SDPA = SDPA_CPU_FLOPS
EXTRA_FLOPS = FLOP_FORMULAS
Run = Callable[[], Any]


# The only code that calls the models: decoding and the library's training objectives.

def beam_run(model: nn.Module, batch: dict[str, Any], steps: int, generator: Any = None) -> Run:
    """Cached beam search (beam 5) in eval mode without gradients, through ``generator`` (a decoding wrapper
    around ``model``; default: the model itself)."""
    def run() -> object:
        model.eval()
        return beam_search(model if generator is None else generator, batch, bos=Vocabulary.BOS,
                           eos=Vocabulary.EOS, beam_size=BEAM, max_len=steps)
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
    """What a replay needs to rebuild a GEMM operand: shape, strides, dtype, and the weight it views (if any: an
    identity per weight, so that each gets its own buffer). (A dataclass, not a NamedTuple: pytree functions would
    take a tuple apart.)"""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    weight: int | None


@dataclasses.dataclass(frozen=True)
class Linear:
    """A recorded product that is x @ W.t() (+ b) with a weight W: what the packed replay runs as oneDNN's linear."""

    x: TensorSpec  # (rows, in)
    weight: TensorSpec  # (out, in), contiguous
    bias: TensorSpec | None  # (out,)

    @property
    def shape(self) -> tuple[int, int, int, bool]:
        """(rows, in, out, with bias): the per-shape choice of the best-kernel bound groups calls by it."""
        return (*self.x.shape, self.weight.shape[0], self.bias is not None)


@dataclasses.dataclass(frozen=True)
class Gemm:
    """One recorded GEMM: the aten call the plain replay runs, and the product as a :class:`Linear` when it has
    a weight operand."""

    func: Any
    args: tuple
    kwargs: dict
    linear: Linear | None


def as_linear(func: Any, args: tuple, kwargs: dict) -> Linear | None:
    """A recorded 2-D ``mm``/``addmm`` (default scalars) as x @ W.t() (+ b), when its second operand is a weight
    (out, in) transposed and the added term is a vector of ``out`` (as ``nn.Linear`` calls it); else None."""
    if func.overloadpacket not in (aten.mm, aten.addmm) or "beta" in kwargs or "alpha" in kwargs:
        return None
    bias, x, transposed = (None, *args[:2]) if func.overloadpacket == aten.mm else args[:3]
    columns, out = transposed.shape
    if transposed.weight is None or transposed.stride != (1, columns):
        return None
    if bias is not None and bias.shape != (out,):
        return None
    return Linear(x, TensorSpec((out, columns), (columns, 1), transposed.dtype, transposed.weight), bias)


class GemmRecorder(TorchDispatchMode):
    """Records every GEMM dispatched inside it — aten's mm/addmm/bmm/baddbmm and oneDNN's linear — with its FLOPs
    (``FlopCounterMode``'s formulas; :func:`linear_flop`). Weights: the model's parameters, tensors computed from
    weights alone (e.g. self-attention's joined query/key/value projection, built once per search) while they
    live, and oneDNN's packed copies (``PackedWeight``'s, the only oneDNN tensors in a run)."""

    def __init__(self, parameters: set[int]) -> None:
        super().__init__()
        self.parameters = parameters  # data pointers of the model's parameters
        self.derived: dict[int, weakref.ref] = {}  # data pointer -> a live tensor computed from weights alone
        self.gemms: list[Gemm] = []
        self.flops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.overloadpacket in GEMMS or func.overloadpacket == LINEAR:
            formula = flop_registry.get(func.overloadpacket) or shape_wrapper(linear_flop)
            self.flops += formula(*args, **kwargs, out_val=out)
            self.gemms.append(self._gemm(func, args, kwargs))
            return out
        inputs = tensors(args, kwargs)
        if inputs and all(self._weight(t) is not None for t in inputs):
            for t in tensors(out):
                if not t.is_mkldnn and self._weight(t) is None:
                    self.derived[t.data_ptr()] = weakref.ref(t)
        return out

    def _gemm(self, func: Any, args: tuple, kwargs: dict) -> Gemm:
        if func.overloadpacket != LINEAR:
            args, kwargs = tree_map(self._spec, args), tree_map(self._spec, kwargs)
            return Gemm(func, args, kwargs, as_linear(func, args, kwargs))
        x, weight, bias = args[:3]  # x (..., in), the packed weight (out, in), bias (out,) or None
        out, columns = weight.shape
        linear = Linear(TensorSpec((x.numel() // columns, columns), (columns, 1), x.dtype, None),
                        TensorSpec((out, columns), (columns, 1), weight.dtype, self._weight(weight)),
                        None if bias is None else self._spec(bias))
        transposed = TensorSpec((columns, out), (1, columns), weight.dtype, linear.weight.weight)
        if bias is None:  # what nn.Linear runs: x @ W.t() (+ b)
            return Gemm(aten.mm.default, (linear.x, transposed), {}, linear)
        return Gemm(aten.addmm.default, (linear.bias, linear.x, transposed), {}, linear)

    def _weight(self, value: Tensor) -> int | None:
        """The identity of the weight ``value`` views, or None for an activation."""
        if value.is_mkldnn:
            return id(value)
        pointer = value.data_ptr()
        alive = self.derived.get(pointer)
        return pointer if pointer in self.parameters or (alive is not None and alive() is not None) else None

    def _spec(self, value: Any) -> Any:
        if not isinstance(value, Tensor):
            return value
        return TensorSpec(tuple(value.shape), value.stride(), value.dtype, self._weight(value))


def tensors(*trees: Any) -> list[Tensor]:
    """The tensors among the leaves of ``trees``."""
    return [leaf for leaf in tree_flatten(trees)[0] if isinstance(leaf, Tensor)]


CHUNK = 32  # recorded GEMMs per stretch of a replay (see replay_seconds)


def replay_seconds(gemms: list[Gemm], packed_first: bool) -> tuple[list[float], list[float]]:
    """Seconds of each recorded GEMM in two replays of the sequence alone, on random operands (one buffer per spec,
    weights distinct): plain — each as aten's GEMM (a recorded oneDNN linear as the ``addmm``/``mm`` of
    ``nn.Linear``) —, and packed — the products by a weight (:class:`Linear`) as oneDNN's linear on a copy of their
    weight reordered once (as ``PackedWeight`` does), the rest as recorded. The two replays alternate stretch by
    stretch (``CHUNK`` calls; ``packed_first``: which starts, then alternating), so a load change on
    the shared machine hits both alike. The buffers are built before the clock starts and freed on return, so only
    one round's operands are ever held (holding all six beside the models got a full-size run killed for memory on
    the shared machine)."""
    buffers: dict[TensorSpec, Tensor] = {}
    reordered: dict[TensorSpec, Tensor] = {}

    def build(value: Any) -> Any:
        if not isinstance(value, TensorSpec):
            return value
        if value not in buffers:
            size = 1 + sum((n - 1) * s for n, s in zip(value.shape, value.stride) if n > 0)
            buffers[value] = torch.randn(size, dtype=value.dtype).as_strided(value.shape, value.stride)
        return buffers[value]

    def pack(weight: TensorSpec) -> Tensor:
        if weight not in reordered:
            reordered[weight] = REORDER(torch.randn(weight.shape, dtype=weight.dtype), PACKED_ROWS)
        return reordered[weight]

    def plan(packed: bool) -> list[tuple[Any, tuple, dict]]:
        return [
            (LINEAR.default, (build(g.linear.x), pack(g.linear.weight), build(g.linear.bias), "none", [], ""), {})
            if packed and g.linear is not None else (g.func, tree_map(build, g.args), tree_map(build, g.kwargs))
            for g in gemms
        ]

    plans = (plan(False), plan(ONEDNN_LINEAR))
    times: tuple[list[float], list[float]] = ([], [])
    for first in range(0, len(gemms), CHUNK):
        for variant in (1, 0) if packed_first == (first // CHUNK % 2 == 0) else (0, 1):
            for func, args, kwargs in plans[variant][first:first + CHUNK]:
                start = time.perf_counter()
                func(*args, **kwargs)
                times[variant].append(time.perf_counter() - start)
    return times


@dataclasses.dataclass
class Measured:
    """One (run, model): FLOPs (all, and those of fused CPU attention), the recorded GEMMs and their FLOPs, and per
    round the run's time, its plain replay's time, its best-kernel time (:meth:`replay`) and, per
    :attr:`Linear.shape`, the plain and packed replays' seconds."""

    flops: int
    sdpa_flops: int
    gemm_flops: int
    gemms: list[Gemm]  # GemmRecorder.gemms
    times: list[float] = dataclasses.field(default_factory=list)
    replay_times: list[float] = dataclasses.field(default_factory=list)
    best_times: list[float] = dataclasses.field(default_factory=list)
    shapes: dict[tuple, list[tuple[float, float]]] = dataclasses.field(default_factory=dict)

    def replay(self, packed_first: bool) -> None:
        """One round of both replays (:func:`replay_seconds`). Best-kernel time = the plain replay's GEMMs without a
        weight, plus per :attr:`Linear.shape` the faster replay's seconds of all its calls (both replays plain
        without oneDNN's linear in this torch build)."""
        plain, packed = replay_seconds(self.gemms, packed_first)
        groups: dict[tuple, list[float]] = {}
        rest = 0.0
        for gemm, a, b in zip(self.gemms, plain, packed):
            if gemm.linear is None:
                rest += a
            else:
                group = groups.setdefault(gemm.linear.shape, [0.0, 0.0])
                group[0] += a
                group[1] += b
        self.replay_times.append(sum(plain))
        self.best_times.append(rest + sum(min(group) for group in groups.values()))
        for shape, (a, b) in groups.items():
            self.shapes.setdefault(shape, []).append((a, b))

    def ratios(self, flops: int | None = None, best: bool = False, times: list[float] | None = None) -> list[float]:
        """Per round: time / (FLOPs / rate), rate = GEMM FLOPs / replay time (plain, or ``best`` kernel);
        ``flops`` replaces the run's own count (e.g. an earlier version's), ``times`` the run's times (e.g. another
        checkout's of the same GEMMs, ``--against``)."""
        flops = self.flops if flops is None else flops
        replays = self.best_times if best else self.replay_times
        return [t * self.gemm_flops / (flops * r) for t, r in zip(self.times if times is None else times, replays)]

    def figures(self) -> dict[str, float]:
        """The medians this benchmark reports, for ``--json`` (rate, bound, ratio: plain; best_*: best kernel)."""
        rate = self.gemm_flops / statistics.median(self.replay_times)
        best = self.gemm_flops / statistics.median(self.best_times)
        return {"flops": self.flops, "sdpa_flops": self.sdpa_flops, "gemm_rate": rate, "bound": self.flops / rate,
                "time": statistics.median(self.times), "ratio": statistics.median(self.ratios()),
                "best_rate": best, "best_bound": self.flops / best,
                "best_ratio": statistics.median(self.ratios(best=True))}

    def shape_rates(self) -> list[str]:
        """Table rows: per :attr:`Linear.shape`, its calls and GFLOP, and the plain and packed replays' rates
        (medians over rounds)."""
        rows = []
        for (rows_, columns, out, bias), times in sorted(self.shapes.items()):
            calls = sum(g.linear is not None and g.linear.shape == (rows_, columns, out, bias) for g in self.gemms)
            flops = 2 * rows_ * columns * out * calls
            plain, packed = (statistics.median(flops / t[i] for t in times) / 1e9 for i in (0, 1))
            rows.append(f"{rows_} x {columns} -> {out}{' + b' if bias else ''} | {calls} | {flops / 1e9:.2f} | "
                        f"{plain:.0f} | {packed:.0f} | {packed / plain:.2f}")
        return rows


def measure(run: Run, model: nn.Module) -> Measured:
    """Count the FLOPs of ``run`` and record its GEMMs (two calls of ``run``; the first is also a warm-up)."""
    with FlopCounterMode(display=False, custom_mapping=EXTRA_FLOPS) as counter:
        run()
    recorder = GemmRecorder({p.data_ptr() for p in model.parameters()})
    with recorder:
        run()
    per_op = counter.get_flop_counts()["Global"]
    sdpa = sum(per_op.get(op, 0) for op in CPU_SDPA)
    return Measured(counter.get_total_flops(), sdpa, recorder.flops, recorder.gemms)


def seconds(run: Run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def build_models(package: str = "vlattn") -> dict[str, nn.Module]:
    """The Transformer of vlattn/presets/transformer.yaml at 3+3 layers and M2 of vlattn/presets/m2.yaml, seeded alike, built by
    ``package`` (this checkout's ``vlattn``, or another's under ``--against``)."""
    config = importlib.import_module(f"{package}.config")
    build = importlib.import_module(f"{package}.models").build_captioner
    configs = {
        "Transformer": config.load_config(
            "transformer", ["model.encoder_layers=3", "model.decoder_layers=3"]
        ),
        "M2": config.load_config("m2"),
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


def against_runs(checkout: Path, into: Path, batch: dict[str, Any], steps: int, packed: bool) -> dict[str, Run]:
    """Model name -> beam search run of ``checkout``'s code (:func:`import_against`) at the same settings;
    ``packed``: with its output layer packed the way ``checkout`` does it."""
    package = import_against(checkout, into)
    decoding = importlib.import_module(f"{package}.decoding")

    def generator_of(model: nn.Module) -> Any:
        if not packed:
            return model
        if hasattr(decoding, "PackedOutput"):
            return decoding.PackedOutput(model)
        return importlib.import_module(f"{package}.layers.packed").use_packed_output(model, True)

    def run_of(model: nn.Module) -> Run:
        generator = generator_of(model)

        def run() -> object:
            model.eval()
            return decoding.beam_search(generator, batch, bos=Vocabulary.BOS, eos=Vocabulary.EOS, beam_size=BEAM,
                                        max_len=steps)
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
    gemm_names = {f"aten::{op.__name__}" for op in GEMMS} | {"mkldnn::_linear_pointwise"}
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
    parser.add_argument("--packed-output", action="store_true",
                        help="this checkout's models decode with the vocabulary projection packed for oneDNN")
    parser.add_argument("--against-packed-output", action="store_true",
                        help="the --against checkout's models decode with their vocabulary projection packed too")


def packing_note(ours: bool, theirs: bool | None) -> str:
    """How each checkout's beam search projects to the vocabulary (``theirs``: None without ``--against``)."""
    note = ("This checkout's beam search: vocabulary projection packed for oneDNN (`--packed-output`: "
            "`vlattn.decoding.PackedOutput`; SCST and XE call the models themselves)." if ours else
            "Beam search on the models as `build_captioner` builds them (no `--packed-output`).")
    if theirs is None:
        return note
    return note + (" The other checkout's beam search packs its projection its own way (`--against-packed-output`)."
                   if theirs else " The other checkout's beam search on its models as it builds them.")


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
        runs[("beam search", name)] = beam_run(model, batch, steps, PackedOutput(model) if args.packed_output else None)
        for task, objective in objectives.items():
            runs[(task, name)] = training_run(model, objective, batch)
    ran = runs[("beam search", "M2")]().tokens.shape[-1]  # words decoded (20 unless every beam ended early)
    runs = {key: run for key, run in runs.items() if key[0] in args.runs}
    scratch = None if args.against is None else tempfile.TemporaryDirectory()  # the renamed copy, removed at exit
    theirs = {} if scratch is None else against_runs(args.against.resolve(), Path(scratch.name), batch, steps,
                                                     args.against_packed_output)
    # compared before any training run (measured below) updates this checkout's weights
    compared = {key: same_beams(run, theirs[key[1]]) for key, run in runs.items() if key[0] == "beam search" and theirs}
    measured = {key: measure(run, models[key[1]]) for key, run in runs.items()}
    their_times: dict[tuple[str, str], list[float]] = {key: [] for key in compared}
    for round_ in range(args.repeats):
        for key, run in runs.items():
            if key in compared and round_ % 2:
                their_times[key].append(seconds(theirs[key[1]]))
            measured[key].times.append(seconds(run))
            if key in compared and not round_ % 2:
                their_times[key].append(seconds(theirs[key[1]]))
            measured[key].replay(packed_first=bool(round_ % 2))
    rows, figures = [], []
    for (task, name), m in measured.items():
        f = m.figures()
        figures.append({"run": task, "model": name, **f})
        earlier = before.get((task, name))
        versus = ""
        if before:
            versus = (f" {earlier / 1e9:.1f} | **{statistics.median(m.ratios(earlier)):.2f}x** | "
                      f"{statistics.median(m.ratios(earlier, best=True)):.2f}x |" if earlier else " - | - | - |")
        if theirs and (task, name) in compared:
            other = their_times[(task, name)]
            versus += (f" {paired_ratio(other, m.times):.3f} ({compared[(task, name)]}) | "
                       f"{statistics.median(m.ratios(earlier, times=other)):.2f}x | "
                       f"{statistics.median(m.ratios(earlier, best=True, times=other)):.2f}x |")
        elif theirs:
            versus += " - | - | - |"
        rows.append(
            f"| {task} | {name} | {(m.flops - m.sdpa_flops) / 1e9:.1f} | {m.sdpa_flops / 1e9:.2f} | "
            f"{f['gemm_rate'] / 1e9:.0f} | {f['best_rate'] / 1e9:.0f} | {f['bound']:.2f} | {f['best_bound']:.2f} | "
            f"{f['time']:.2f} | **{f['ratio']:.2f}x** | {f['best_ratio']:.2f}x |{versus}"
        )
    shapes = "\n".join(f"| {task} | {name} | {row} |"
                       for (task, name), m in measured.items() for row in m.shape_rates())
    if args.json is not None:
        settings = {"batch": batch_size, "steps": steps, "ran": ran, "repeats": args.repeats,
                    "packed_output": args.packed_output, "against_packed_output": args.against_packed_output,
                    "torch": torch.__version__}
        atomic_write_text(args.json, json.dumps({"settings": settings, "rows": figures}, indent=1) + "\n")
    extra_head = (f" GFLOP of {args.before.name} | time / plain bound at its FLOPs | time / best-kernel bound at its"
                  " FLOPs |" if before else "")
    at = " at its FLOPs" if before else ""
    extra_head += (f" time of {args.against} / this checkout's, paired rounds | its time / plain bound{at} |"
                   f" its time / best-kernel bound{at} |" if theirs else "")
    packed = packing_note(args.packed_output, args.against_packed_output if theirs else None)
    body = f"""Batch {batch_size}, {REGIONS} regions x {FEATURES}-d, d=512, 8 heads, FFN 2048, 3+3 layers, vocabulary {VOCAB};
Transformer = vlattn/presets/transformer.yaml with 3+3 layers, M2 = vlattn/presets/m2.yaml. Beam search: beam {BEAM}, {steps} steps
(ran {ran}), eval mode, K/V caches. SCST step: train mode, beam {BEAM} with gradients, CIDEr-D reward, mean baseline,
loss, backward, Adam. XE step: train mode, {steps} tokens, cross-entropy, backward, Adam. Adam = the train stages'
(`build_optimizer`: PyTorch's fused kernel). {packed}
FLOPs: `FlopCounterMode` (its own registry: GEMMs, and in training the attention's math-path bmm), plus the fused
CPU SDPA kernel of eval-mode attention and oneDNN's linear, which its registry lacks (counted with the CUDA SDPA
kernel's formula and addmm's). Rates: the run's own GEMM sequence (mm/addmm/bmm/baddbmm and oneDNN's linear, same
shapes and strides, one buffer per weight) replayed alone, GEMM FLOPs / replay time, measured next to each run.
Plain: every GEMM as aten's (oneDNN's linear as `nn.Linear`'s addmm). Best kernel: a second replay, alternating
with the plain one every {CHUNK} calls, runs every product by a weight (x @ W.t() + b) as oneDNN's linear on the weight
packed once; per such shape the faster replay's time counts (the other GEMMs: the plain replay's). Bound = all
FLOPs / rate. `torch.set_num_threads(1)`, {args.repeats} rounds (every run then its two replays), medians;
ratio = median over rounds of time / bound. torch {torch.__version__}, shared 2-CPU machine.

| run | model | GFLOP (`FlopCounterMode`) | + GFLOP fused SDPA | GEMM rate, plain (GFLOP/s) | GEMM rate, best kernel | bound, plain (s) | bound, best kernel (s) | time (s) | time / plain bound | time / best-kernel bound |{extra_head}
|---|---|---|---|---|---|---|---|---|---|---|{"---|---|---|" if before else ""}{"---|---|---|" if theirs else ""}
{chr(10).join(rows)}

Products by a weight, per shape (rows x in -> out, + bias), in the replays above: calls, GFLOP, rate as aten's GEMM
and as oneDNN's linear on the packed weight (GFLOP/s, medians over rounds of the shape's calls together), packed /
plain:

| run | model | shape | calls | GFLOP | plain | packed | packed / plain |
|---|---|---|---|---|---|---|---|
{shapes}"""
    if args.profile:
        shares = "\n".join(f"| {task} | {name} | {time_shares(run, args.profile)} |"
                           for (task, name), run in runs.items())
        body += f"""

Where the time goes (`--profile {args.profile}`: one more call of each run under `torch.profiler`, self CPU time per
operator as % of that call's wall time; GEMMs = mm/addmm/bmm/baddbmm and oneDNN's linear; fused attention = the CPU SDPA kernel,
forward and backward; outside operators = Python, dispatch and the profiler's own overhead):

| run | model | GEMMs % | fused attention % | largest other operators (%) | other operators % | outside operators % |
|---|---|---|---|---|---|---|
{shares}"""
    publish("Roofline", body, args)


if __name__ == "__main__":
    main()
