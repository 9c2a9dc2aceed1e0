"""Model profiling for ``vlattn profile``: trainable parameters, FLOPs of one XE training step and of one
cached decoding step (``torch.utils.flop_counter.FlopCounterMode`` with :data:`FLOP_FORMULAS`), a model's backbone
layers, and measured latency.

Inputs are random tensors of the given shapes: ``batch`` images of ``regions`` x ``feature_dim`` features,
captions of ``length`` tokens over a vocabulary of ``vocab`` ids. The model must implement
``forward(inputs, tokens)`` and ``encode``/``step``.

The *backbone* is what the LW-Transformer paper counts (Table II, "#Params", "MAdds"): the encoder and
decoder layers, without embeddings, input projection and output layer. Models that have one list its layers
in ``backbone_layers()``; :func:`backbone_parameters` counts them and :func:`backbone_madds` measures their
multiply-adds in one teacher-forced forward pass of one sample (:func:`backbone_madds_of`: during any forward
pass, e.g. a VQA model answering one question).

torch's counter has no formula for the fused CPU attention kernel (``_scaled_dot_product_flash_attention_for_cpu``
and its backward) nor for oneDNN's linear on a packed weight (``mkldnn._linear_pointwise``, what
:class:`~vlattn.layers.packed.PackedLinear` runs), so every count here goes through :data:`FLOP_FORMULAS`: the two
attention products of SDPA (Q K^T and A V) and the linear's product, counted as the ``addmm`` it replaces.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from vlattn.attention.sla import GridPositionalBias
from vlattn.errors import ConfigError
from vlattn.layers.packed import ONEDNN_LINEAR


def _sdpa_flops(query_shape, key_shape, value_shape, *args, **kwargs) -> int:
    """FLOPs of softmax(Q K^T) V: 2 B H Nq Nk (d_qk + d_v)."""
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _sdpa_backward_flops(grad_out_shape, query_shape, key_shape, value_shape, *args, **kwargs) -> int:
    """FLOPs of the gradients of softmax(Q K^T) V with respect to Q, K and V."""
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def onednn_linear_flops(x_shape, weight_shape, *args, **kwargs) -> int:
    """FLOPs of oneDNN's linear, x (..., in) by a weight (out, in): ``addmm``'s count, 2 x rows x in x out (the
    packed weight keeps the logical (out, in) shape)."""
    return 2 * math.prod(x_shape[:-1]) * x_shape[-1] * weight_shape[0]


# formulas torch's FlopCounterMode lacks (shape arguments in the op's order)
SDPA_CPU_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_backward_flops,
}
FLOP_FORMULAS = (
    {**SDPA_CPU_FLOPS, torch.ops.mkldnn._linear_pointwise: onednn_linear_flops} if ONEDNN_LINEAR else SDPA_CPU_FLOPS
)


def count_parameters(model: nn.Module) -> dict[str, int]:
    """Trainable parameters: ``total`` and one entry per top-level child module (shared ones counted once
    in ``total``)."""
    counts = {name: trainable(child) for name, child in model.named_children()}
    return {"total": trainable(model), **counts}


def trainable(module: nn.Module) -> int:
    """Number of trainable parameters of ``module`` (shared parameters counted once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def backbone_parameters(model: nn.Module) -> int | None:
    """Trainable parameters of the model's ``backbone_layers()`` (None for models without a layer backbone)."""
    if not hasattr(model, "backbone_layers"):
        return None
    return trainable(nn.ModuleList(model.backbone_layers()))


def grid_cells(model: nn.Module) -> int | None:
    """The number of keys a model reading a fixed grid expects (the cells of its grid positional biases), None
    for a model that reads any number of regions; :class:`ConfigError` if its grids differ in size."""
    cells = {module.cells for module in model.modules() if isinstance(module, GridPositionalBias)}
    if len(cells) > 1:
        raise ConfigError(f"the model's grid positional biases expect different grids: {sorted(cells)} cells")
    return next(iter(cells), None)


def backbone_madds(model: nn.Module, regions: int, length: int, feature_dim: int, vocab: int) -> int | None:
    """Multiply-adds (FLOPs / 2) of the backbone layers in one teacher-forced forward pass of one sample: the
    encoder over ``regions`` regions, the decoder over ``length`` tokens (None without a layer backbone)."""
    inputs = random_batch(1, regions, length, feature_dim, vocab)
    return backbone_madds_of(model, lambda: model(inputs, inputs["tokens"][:, :length]))


def backbone_madds_of(model: nn.Module, run: Callable[[], object]) -> int | None:
    """Multiply-adds (FLOPs / 2) of the model's ``backbone_layers()`` during ``run()`` (None without them)."""
    if not hasattr(model, "backbone_layers"):
        return None
    names = {id(module): name for name, module in model.named_modules()}
    prefix = type(model).__name__
    layers = {names[id(layer)]: layer for layer in model.backbone_layers()}
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=FLOP_FORMULAS) as counter:
        run()
    counts = counter.get_flop_counts()

    def flops(name: str, module: nn.Module) -> int:
        """A module's count, or its children's when it was not called itself (a layer whose halves the model calls
        as methods, e.g. LXMERT+CATT's cross-modality layers)."""
        if f"{prefix}.{name}" in counts:
            return sum(counts[f"{prefix}.{name}"].values())
        return sum(flops(f"{name}.{child_name}", child) for child_name, child in module.named_children())

    return sum(flops(name, layer) for name, layer in layers.items()) // 2


def random_regions(batch: int, regions: int, feature_dim: int, generator: torch.Generator) -> dict[str, Tensor]:
    """Random ``features`` (B, N, D), ``boxes`` (B, N, 4) and all-real ``region_mask`` (B, N)."""
    corner = torch.rand(batch, regions, 2, generator=generator) * 100
    return {
        "features": torch.randn(batch, regions, feature_dim, generator=generator),
        "boxes": torch.cat([corner, corner + 1 + torch.rand(batch, regions, 2, generator=generator) * 100], dim=-1),
        "region_mask": torch.ones(batch, regions, dtype=torch.bool),
    }


def random_batch(batch: int, regions: int, length: int, feature_dim: int, vocab: int) -> dict[str, Tensor]:
    """:func:`random_regions` and ``tokens`` (B, length + 1)."""
    generator = torch.Generator().manual_seed(0)
    inputs = random_regions(batch, regions, feature_dim, generator)
    return {**inputs, "tokens": torch.randint(4, vocab, (batch, length + 1), generator=generator)}


def train_step(model: nn.Module, inputs: dict[str, Tensor]) -> None:
    """Forward, teacher-forced cross-entropy and backward (gradients are cleared afterwards)."""
    tokens = inputs["tokens"]
    logits = model(inputs, tokens[:, :-1])  # (B, T, V)
    F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    model.zero_grad(set_to_none=True)


def decode_step(model: nn.Module, inputs: dict[str, Tensor]) -> Callable[[], None]:
    """A closure running one decoding ``step`` on ``tokens`` (B, length + 1) from a state warmed over the
    first ``length`` of them; each run steps a copy (``step`` extends caches in place)."""
    tokens = inputs["tokens"]
    rows = torch.arange(tokens.shape[0])
    with torch.no_grad():
        state = model.encode(inputs)
        for t in range(1, tokens.shape[1]):
            _, state = model.step(tokens[:, :t], state)

    def run() -> None:
        with torch.no_grad():
            model.step(tokens, model.reorder(state, rows))

    return run


def count_flops(run: Callable[[], None]) -> int:
    """Total FLOPs of ``run()``."""
    with FlopCounterMode(display=False, custom_mapping=FLOP_FORMULAS) as counter:
        run()
    return counter.get_total_flops()


def flops_train_step(model: nn.Module, batch: int, regions: int, length: int, feature_dim: int, vocab: int) -> int:
    """FLOPs of one XE training step (forward + loss + backward) at the given shapes."""
    inputs = random_batch(batch, regions, length, feature_dim, vocab)
    return count_flops(lambda: train_step(model, inputs))


def flops_decode_step(model: nn.Module, batch: int, regions: int, length: int, feature_dim: int, vocab: int) -> int:
    """FLOPs of the decoding step that predicts word ``length + 1`` after ``length`` words (with the model's
    cache setting; the per-image encoding is excluded)."""
    run = decode_step(model, random_batch(batch, regions, length, feature_dim, vocab))
    return count_flops(run)


def latency(
    model: nn.Module, batch: int, regions: int, length: int, feature_dim: int, vocab: int, repeats: int = 5
) -> dict[str, float]:
    """Median wall-clock milliseconds of one training step and one decoding step (the latter including a
    copy of the warm decoding state) over ``repeats`` interleaved runs."""
    inputs = random_batch(batch, regions, length, feature_dim, vocab)
    return latency_of({"train_step_ms": lambda: train_step(model, inputs), "decode_step_ms": decode_step(model, inputs)},
                      repeats)


def latency_of(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall-clock milliseconds of each run over ``repeats`` interleaved runs."""
    return {name: statistics.median(times) for name, times in time_interleaved(runs, repeats).items()}


def time_interleaved(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Milliseconds of ``repeats`` calls of each run, interleaved (A B A B ...) after one warm-up call each,
    so that machine noise hits every run alike."""
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - start) * 1000)
    return times


def format_profile(report: dict) -> str:
    """Human-readable table of a profile report (``model``, ``shapes``, ``threads``, ``parameters``, ``flops``,
    ``latency_ms``, optionally ``backbone``: ``parameters`` and ``madds_per_sample``), as ``vlattn profile``
    prints it."""
    shapes = ", ".join(f"{k}={v}" for k, v in report["shapes"].items())
    lines = [f"{report['model']} ({shapes}; {report['threads']} threads)", "trainable parameters:"]
    lines += [f"  {name:<16} {count:>14,}" for name, count in report["parameters"].items()]
    backbone = report.get("backbone") or {}
    if backbone.get("parameters") is not None:
        lines.append("backbone (encoder + decoder layers; no embeddings, input projection, output layer):")
        lines.append(f"  {'parameters':<12} {backbone['parameters']:>14,}")
        lines.append(f"  {'MAdds':<12} {backbone['madds_per_sample'] / 1e9:>14.3f} G  (forward, one sample: "
                     f"{report['shapes']['regions']} regions, {report['shapes']['length']} tokens)")
    lines.append("FLOPs:")
    lines += [f"  {name:<12} {count / 1e9:>14.3f} G" for name, count in report["flops"].items()]
    lines.append("latency (median):")
    lines += [f"  {name:<14} {ms:>12.1f} ms" for name, ms in report["latency_ms"].items()]
    return "\n".join(lines)


def classifier_profile(model: nn.Module, inputs: Mapping[str, Tensor], single: Mapping[str, Tensor],
                       loss: Callable[[Tensor], Tensor], repeats: int, inference: str) -> dict[str, Any]:
    """Parameters (total, per top-level module, backbone), FLOPs of a training step (forward, ``loss`` of the
    logits, backward) and of a forward pass over ``inputs`` (named ``inference``), backbone multiply-adds of the
    one-sample ``single``, and latency, of a model mapping inputs to logits."""

    def train_step() -> None:
        loss(model(inputs)).backward()
        model.zero_grad(set_to_none=True)

    def forward() -> None:
        with torch.no_grad():
            model(inputs)

    model.train()
    train_flops = count_flops(train_step)
    model.eval()
    forward_flops = count_flops(forward)
    madds = backbone_madds_of(model, lambda: model(single))
    model.train()
    return {
        "threads": torch.get_num_threads(),
        "parameters": count_parameters(model),
        "backbone": {"parameters": backbone_parameters(model), "madds_per_sample": madds},
        "flops": {"train_step": train_flops, inference: forward_flops},
        "latency_ms": latency_of({"train_step_ms": train_step, f"{inference}_ms": forward}, repeats),
    }
