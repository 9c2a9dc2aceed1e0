"""The captioners' vocabulary projection through oneDNN with its weight packed once (``eval.packed_output``).

At decoding time the output layer (d -> V, e.g. 512 -> 10201) is the largest product of every step, with few rows
(B x beam): torch's ``addmm`` on the CPU re-packs the whole (V, d) weight at each call, and at these shapes runs at
about half the rate of the model's other products on this project's machine (benchmarks/RESULTS.md "Roofline").
oneDNN's linear with the weight reordered once into its blocked layout (``mkldnn._reorder_linear_weight``,
as torch's inductor does for frozen CPU models) computes the same product 1.5-1.8x faster at 10-100 rows.

:class:`PackedLinear` takes that path only where it is the same function: a float32 input on the CPU, no gradient
to record (decoding under ``no_grad``/``inference_mode``), outside autocast and compilation, with oneDNN in the torch
build; otherwise it is ``nn.Linear``. The packed copy is rebuilt whenever the weight changes (an optimiser step or
a loaded state dict bumps its version), so training with validation in between stays correct; it is not part of
the state dict. Results equal ``nn.Linear``'s up to float rounding (another summation order: about 1e-6 relative),
hence off by default.
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


class PackedLinear(nn.Linear):
    """``nn.Linear`` whose gradient-free float32 CPU calls use a packed copy of the weight; (..., in) -> (..., out)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self._packed: tuple[tuple[Any, int, int], Tensor] | None = None  # (what it was packed from, packed weight)

    def packs(self, x: Tensor) -> bool:
        """Whether a call on ``x`` takes the packed path."""
        return (
            ONEDNN_LINEAR
            and x.device.type == "cpu"
            and x.dtype == self.weight.dtype == torch.float32
            and not (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))
            and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling()
        )

    def packed_weight(self) -> Tensor:
        """The weight in oneDNN's layout, reordered again when the weight changed since the last call: another
        Parameter object (a weak reference tells, not an address that may be reused), other storage, or an in-place
        change (the tensor's version counter)."""
        weight = self.weight
        if self._packed is not None:
            (source, pointer, version), packed = self._packed
            if source() is weight and pointer == weight.data_ptr() and version == weight._version:
                return packed
        with torch.no_grad():
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACKED_ROWS)
        self._packed = (weakref.ref(weight), weight.data_ptr(), weight._version), packed
        return packed

    def __getstate__(self) -> dict[str, Any]:
        """Copies and pickles leave the packed weight behind (an opaque oneDNN tensor, rebuilt on demand)."""
        return {**super().__getstate__(), "_packed": None}

    def forward(self, x: Tensor) -> Tensor:
        if not self.packs(x):
            return super().forward(x)
        bias = None if self.bias is None else self.bias.detach()
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight(), bias, "none", [], "")


def use_packed_output(model: nn.Module, packed: bool) -> nn.Module:
    """``model`` with its decoders' vocabulary projections (the ``output`` child, an ``nn.Linear``, of any module)
    swapped for :class:`PackedLinear` sharing the same parameters (in place; returns ``model``)."""
    if not packed:
        return model
    for module in list(model.modules()):
        child = getattr(module, "output", None)
        if type(child) is nn.Linear:
            swapped = PackedLinear(child.in_features, child.out_features, bias=child.bias is not None, device="meta")
            swapped.weight = child.weight  # the same Parameter objects: tied embeddings stay tied
            swapped.bias = child.bias
            module.output = swapped
    return model
