"""Capture what a model's attention does, at the calls the model makes (decoding included), not recomputed.

:class:`AttentionRecorder` is a context manager over a model: while it is active, the instances of the attention
paths below record a detached CPU copy of what they compute, in call order, under the module's name in the model;
on exit every instance is restored. Nothing is recorded outside the context, and the model's results are those of
the same call with ``need_weights=True`` — for the multi-head family that selects the explicit softmax path
instead of the fused SDPA kernel, equal to float rounding.

What is recorded (``Call.kind``):

- ``attention``: the weights (B, H, Nq, Nk) of every multi-head-family call (``MultiHeadAttention.attend``, which
  plain calls, M2's ``attend_each`` over encoder levels, memory slots (Nk = regions + slots), G-MHA, NSA/GSA and
  CATT's in-sample and cross-sample attentions all go through) and of additive attention (B, 1, Nq, Nk);
- ``units``: every unit's weights of a stacked / SLA mechanism, (T, B, 1, Nq, Nk), and of each stream of the
  twin-stream VQA model (recorded when the stream's output is read);
- ``geometry``: GSA's geometric bias phi (B, H, Nq, Nk) added to the logits;
- ``gates``: M2's meshed gates alpha (N levels, R, T, d);
- ``streams``: CATT's fused streams, the L2 norms of the in-sample and cross-sample inputs (2, ..., positions);
- ``reduction``: MCAN's attentional reduction (AttFlat) weights (B, G, N).

Shapes follow the call: a cross site of a Transformer decoder attends an image's g decoding rows as one block of
queries (B images, g T queries), so one greedy step of one image records (1, H, 1, N).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
from torch import Tensor, nn

from vlattn.attention import AdditiveAttention, AttentionOutput, MultiHeadAttention
from vlattn.attention.gsa import GeometryAwareSelfAttention
from vlattn.attention.stacked import UnitStack
from vlattn.catt.fusion import StreamFusion
from vlattn.models.meshed import MeshedCrossAttention
from vlattn.models.reduction import AttentionalReduction
from vlattn.models.twin_stream import Stream


@dataclass(frozen=True)
class Call:
    """One recorded call: the module's ``site`` (its name in the model), ``kind`` (see the module docstring) and
    ``value``, a detached float32 CPU tensor."""

    site: str
    kind: str
    value: Tensor


def _keep(tensor: Tensor) -> Tensor:
    return tensor.detach().float().cpu().clone()


@dataclass
class AttentionRecorder:
    """``with AttentionRecorder(model) as recorder: ...`` records :class:`Call` objects in ``recorder.calls``."""

    model: nn.Module
    calls: list[Call] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)  # len(calls) when each decoding step of the model began
    _patched: list[tuple[nn.Module, str]] = field(default_factory=list)

    def __enter__(self) -> AttentionRecorder:
        if callable(getattr(self.model, "step", None)):
            self._patch(self.model, "step", self._mark_step(self.model.step))
        for name, module in self.model.named_modules():
            for attribute, make in ((a, t) for cls, a, t in TAPS if isinstance(module, cls)):
                self._patch(module, attribute, make(self, name, getattr(module, attribute)))
        return self

    def _patch(self, module: nn.Module, attribute: str, replacement: Callable[..., Any]) -> None:
        setattr(module, attribute, replacement)
        self._patched.append((module, attribute))

    def _mark_step(self, step: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(step)
        def marked(*args: Any, **kwargs: Any) -> Any:
            self.steps.append(len(self.calls))
            return step(*args, **kwargs)
        return marked

    def step_calls(self, index: int) -> list[Call]:
        """The calls made during decoding step ``index`` (a captioner's ``step``)."""
        end = self.steps[index + 1] if index + 1 < len(self.steps) else len(self.calls)
        return self.calls[self.steps[index]:end]

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        for module, attribute in reversed(self._patched):
            delattr(module, attribute)  # the instance attribute goes; the class's method shows again
        self._patched.clear()

    def record(self, site: str, kind: str, value: Tensor) -> None:
        self.calls.append(Call(site, kind, _keep(value)))

    def of(self, kind: str, site: str | None = None) -> list[Call]:
        """The recorded calls of ``kind`` (and ``site``), in call order."""
        return [c for c in self.calls if c.kind == kind and (site is None or c.site == site)]

    def sites(self, kind: str) -> list[str]:
        """The sites that recorded ``kind``, in the order of their first call."""
        return list(dict.fromkeys(c.site for c in self.calls if c.kind == kind))


Tap = Callable[[AttentionRecorder, str, Callable[..., Any]], Callable[..., Any]]


def _tap_attend(recorder: AttentionRecorder, site: str, attend: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(attend)
    def tapped(*args: Any, need_weights: bool = False, **kwargs: Any) -> tuple[Tensor, Tensor | None]:
        out, weights = attend(*args, need_weights=True, **kwargs)
        recorder.record(site, "attention", weights)
        return out, weights if need_weights else None
    return tapped


def _tap_forward_weights(recorder: AttentionRecorder, site: str, forward: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(forward)
    def tapped(*args: Any, need_weights: bool = False, **kwargs: Any) -> AttentionOutput:
        result = forward(*args, need_weights=True, **kwargs)
        recorder.record(site, "attention", result.weights)
        return AttentionOutput(result.out, result.weights if need_weights else None)
    return tapped


def _tap_trace(recorder: AttentionRecorder, site: str, trace: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(trace)
    def tapped(*args: Any, **kwargs: Any) -> Any:
        result = trace(*args, **kwargs)
        recorder.record(site, "units", torch.stack(list(result.weights)))
        return result
    return tapped


def _tap_stream_output(recorder: AttentionRecorder, site: str, output: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(output)
    def tapped(state: Any) -> Any:
        recorder.record(site, "units", torch.stack(list(state.weights)))  # every unit's weights, (T, B, 1, 1, K)
        return output(state)
    return tapped


def _tap_returned(kind: str) -> Tap:
    """A tap recording what the method returns (when it is a tensor) under ``kind``."""
    def make(recorder: AttentionRecorder, site: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def tapped(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            if isinstance(result, Tensor):
                recorder.record(site, kind, result)
            return result
        return tapped
    return make


def _tap_streams(recorder: AttentionRecorder, site: str, forward: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(forward)
    def tapped(in_sample: Tensor, cross_sample: Tensor) -> Tensor:
        recorder.record(site, "streams", torch.stack([in_sample.norm(dim=-1), cross_sample.norm(dim=-1)]))
        return forward(in_sample, cross_sample)
    return tapped


# module type (subclasses included) -> the method tapped and how
TAPS: tuple[tuple[type, str, Tap], ...] = (
    (MultiHeadAttention, "attend", _tap_attend),
    (GeometryAwareSelfAttention, "logit_bias", _tap_returned("geometry")),
    (AdditiveAttention, "forward", _tap_forward_weights),
    (UnitStack, "trace", _tap_trace),
    (Stream, "output", _tap_stream_output),
    (MeshedCrossAttention, "gates", _tap_returned("gates")),
    (StreamFusion, "forward", _tap_streams),
    (AttentionalReduction, "weights", _tap_returned("reduction")),
)
