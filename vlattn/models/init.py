"""Model-wide initialisation passes applied after every module has initialised itself.

:func:`xavier_saved_tensors` is the released M2 code's final step (its ``Transformer.init_weights``): every
tensor the model saves that has more than one dimension — weight matrices, the word embedding, the output
layer, and the frozen position table (a parameter there, a saved buffer here) — is redrawn from Xavier-uniform
with fan-in/fan-out of its own shape. Biases and LayerNorm parameters keep their module's initialisation.

:func:`glorot` is "all model parameters are initialized as suggested by Glorot et al." (the SLA paper, Sec. 4.1.2):
Xavier-uniform on every weight tensor as above, and zero biases (Glorot and Bengio 2010, Sec. 4.2.1); an
embedding's padding row stays zero.

:func:`bert_init` is BERT's (and LXMERT's) ``init_bert_weights``: every ``nn.Linear`` and ``nn.Embedding`` weight
from N(0, std^2) (and every group-wise :class:`~vlattn.layers.grouped.GroupedLinear` weight: LW-LXMERT's
G-MHA and G-FFN blocks draw as the dense layers they replace), Linear biases zero, LayerNorm weights one and
biases zero; an embedding's padding row zero (as ``nn.Embedding`` leaves it). Parameters of other modules (memory slots, dictionaries) keep their own.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from vlattn.layers.grouped import GroupedLinear


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


@torch.no_grad()
def glorot(model: nn.Module) -> None:
    """Xavier-uniform weights (:func:`xavier_saved_tensors`), zero biases, zero embedding padding rows."""
    xavier_saved_tensors(model)
    for name, parameter in model.named_parameters():
        if parameter.dim() == 1 and name.rsplit(".", 1)[-1].startswith("bias"):
            parameter.zero_()
    for module in model.modules():
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            module.weight[module.padding_idx].zero_()


@torch.no_grad()
def bert_init(model: nn.Module, std: float = 0.02) -> None:
    """BERT's initialisation of the Linear, Embedding and LayerNorm modules of ``model`` (see the module docstring)."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, GroupedLinear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, std)
        if isinstance(module, (nn.Linear, GroupedLinear)) and module.bias is not None:
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding) and module.padding_idx is not None:
            module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm) and module.elementwise_affine:
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
