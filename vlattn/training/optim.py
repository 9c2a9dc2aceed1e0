"""The optimiser: Adam as in every paper, with weight decay (when set) only where it belongs.

Weight decay shrinks weights towards zero. That regularises projection matrices, but pulling a norm's gain
towards 0, a bias, a learned memory slot or a global dictionary entry towards the origin is not
regularisation, it is a change of the model. :func:`parameter_groups` therefore exempts

- every parameter of a normalisation module (:data:`NORM_TYPES`: LayerNorm, GroupNorm, batch and instance
  norms, and subclasses of them);
- every parameter with fewer than two dimensions (biases, the gains of any norm, scalar gates);
- the parameters a module lists by name in its class attribute ``no_weight_decay`` (memory slots of
  :class:`~vlattn.attention.MemoryAugmentedAttention`, CATT's dictionaries), dotted names allowed.

The update runs as PyTorch's fused Adam kernel (one pass over each parameter, its gradient and both moments)
wherever PyTorch has one (CPU, CUDA, ...; floating-point parameters): the same update as the default
implementation to float rounding, about 5x faster on one CPU thread (benchmarks/RESULTS.md "Fused Adam":
M2's update 0.169 s -> 0.035 s, parameters 2.2e-8 apart after 8 steps; the default update was the largest non-GEMM
cost of an XE step). The optimiser state (moments, step counts) is the same either way, so a checkpoint of either
implementation resumes with this one.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.optim import Adam
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

NORM_TYPES: tuple[type[nn.Module], ...] = (
    nn.LayerNorm,
    nn.GroupNorm,
    nn.modules.batchnorm._BatchNorm,
    nn.modules.instancenorm._InstanceNorm,
)


def decay_exempt(model: nn.Module) -> set[int]:
    """``id``s of the parameters of ``model`` that weight decay must not touch (see the module docstring)."""
    exempt = {id(p) for p in model.parameters() if p.dim() < 2}
    for module in model.modules():
        if isinstance(module, NORM_TYPES):
            exempt.update(id(p) for p in module.parameters())
        exempt.update(id(module.get_parameter(name)) for name in getattr(module, "no_weight_decay", ()))
    return exempt


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Optimiser parameter groups: one group of every trainable parameter when ``weight_decay`` is 0; else
    ``[{decayed params, weight_decay}, {exempt params, weight_decay 0}]`` (empty groups dropped). Parameters
    keep the order of ``model.parameters()`` within each group; shared parameters appear once."""
    params = [p for p in model.parameters() if p.requires_grad]
    if weight_decay == 0:
        return [{"params": params}]
    exempt = decay_exempt(model)
    groups = [
        {"params": [p for p in params if id(p) not in exempt], "weight_decay": weight_decay},
        {"params": [p for p in params if id(p) in exempt], "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


def fused_supported(params: Iterable[torch.Tensor]) -> bool:
    """Whether PyTorch's fused optimiser kernels take every tensor of ``params`` (floating point, on a device with
    the kernels)."""
    devices = _get_fused_kernels_supported_devices()
    return all(p.is_floating_point() and p.device.type in devices for p in params)


def build_optimizer(
    model: nn.Module, betas: tuple[float, float], weight_decay: float = 0.0, eps: float = 1e-8
) -> Adam:
    """Adam over :func:`parameter_groups` (the learning rate is set by the schedule before every step), fused where
    supported (module docstring)."""
    groups = parameter_groups(model, weight_decay)
    fused = fused_supported(p for group in groups for p in group["params"]) or None  # None: PyTorch's default
    return Adam(groups, lr=0.0, betas=betas, eps=eps, weight_decay=0.0, fused=fused)
