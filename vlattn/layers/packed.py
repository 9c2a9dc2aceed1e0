"""A linear map through oneDNN with its weight packed once: the vocabulary projection of CPU decoding
(``eval.packed_output``, applied by :class:`vlattn.decoding.packed.PackedOutput`).

At decoding time the output layer (d -> V, e.g. 512 -> 10201) is the largest product of every step, with few rows
(B x beam): torch's ``addmm`` on the CPU re-packs the whole (V, d) weight at each call, and at these shapes runs at
about half the rate of the model's other products on this project's machine (benchmarks/RESULTS.md "Roofline").
oneDNN's linear with the weight reordered once into its blocked layout (``mkldnn._reorder_linear_weight``, as
torch's inductor does for frozen CPU models) computes the same product 1.5-1.8x faster at 10-100 rows.

:class:`PackedWeight` takes that path only where it is the same function (:func:`packs`): a float32 input on the
CPU, no gradient to record (decoding under ``no_grad``/``inference_mode``), outside autocast and compilation, with
oneDNN in the torch build. The packed copy is rebuilt whenever the weight changes (an optimiser step or a loaded
state dict bumps its version, a new Parameter replaces it), so decoding between training steps stays correct; it
belongs to the :class:`PackedWeight`, never to the model (not in its state dict, copies or pickles). Results equal
``nn.Linear``'s up to float rounding (another summation order: about 1e-6 relative), hence off by default.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import Tensor, nn


def _onednn_linear_available() -> bool:
    """Whether this torch build has oneDNN and its packed-linear operators."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight  # noqa: B018  (raises when the build lacks the operator)
        torch.ops.mkldnn._linear_pointwise  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return True


ONEDNN_LINEAR = _onednn_linear_available()
PACKED_ROWS = 50  # the row count the weight's layout is chosen for (oneDNN's hint; any row count works)


def packs(layer: nn.Linear, x: Tensor) -> bool:
    """Whether ``layer`` applied to ``x`` may run as oneDNN's linear on a packed weight: the same function
    (float32 on the CPU, nothing for autograd to record, no autocast or compilation around it)."""
    return (
        ONEDNN_LINEAR
        and x.device.type == "cpu"
        and x.dtype == layer.weight.dtype == torch.float32
        and not (torch.is_grad_enabled() and (x.requires_grad or layer.weight.requires_grad))
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
    )


class PackedWeight:
    """The packed copy of one linear layer's weight: ``self(layer, x)`` is ``layer(x)``, (..., in) -> (..., out),
    computed by oneDNN from the weight reordered once; call it only where :func:`packs` holds."""

    def __init__(self) -> None:
        self._packed: tuple[tuple[Any, int, int], Tensor] | None = None  # (what it was packed from, packed weight)

    def weight(self, layer: nn.Linear) -> Tensor:
        """``layer``'s weight in oneDNN's layout, reordered again when the weight changed since the last call:
        another Parameter object (a weak reference tells, not an address that may be reused), other storage, or an
        in-place change (the tensor's version counter)."""
        weight = layer.weight
        if self._packed is not None:
            (source, pointer, version), packed = self._packed
            if source() is weight and pointer == weight.data_ptr() and version == weight._version:
                return packed
        with torch.no_grad():
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACKED_ROWS)
        self._packed = (weakref.ref(weight), weight.data_ptr(), weight._version), packed
        return packed

    def __call__(self, layer: nn.Linear, x: Tensor) -> Tensor:
        bias = None if layer.bias is None else layer.bias.detach()
        return torch.ops.mkldnn._linear_pointwise(x, self.weight(layer), bias, "none", [], "")
