"""Model-wide initialisation passes applied after every module has initialised itself.

:func:`xavier_saved_tensors` is the released M2 code's final step (its ``Transformer.init_weights``): every
tensor the model saves that has more than one dimension — weight matrices, the word embedding, the output
layer, and the frozen position table (a parameter there, a saved buffer here) — is redrawn from Xavier-uniform
with fan-in/fan-out of its own shape. Biases and LayerNorm parameters keep their module's initialisation.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn


@torch.no_grad()
def xavier_saved_tensors(model: nn.Module, skip: Iterable[Tensor] = ()) -> None:
    """Xavier-uniform on every saved floating-point tensor of ``model`` with more than one dimension, except
    those in ``skip`` (tensors whose layout differs from the released one initialise themselves). Tied
    tensors are drawn once."""
    skipped = {id(tensor) for tensor in skip}
    seen: set[int] = set()
    for tensor in model.state_dict(keep_vars=True).values():
        if tensor.dim() < 2 or not tensor.is_floating_point() or id(tensor) in skipped | seen:
            continue
        seen.add(id(tensor))
        nn.init.xavier_uniform_(tensor)
