"""Weight decay: parameter groups exempt norms, biases, memory slots and whatever a module lists in
``no_weight_decay``; an exempt parameter is not moved by decay, a decayed one shrinks; resuming keeps the
configured hyper-parameters."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
import torch
from torch import nn

from vlattn.attention import build_attention
from vlattn.errors import VlattnError
from vlattn.training.logging import RunLog
from vlattn.training.loop import LoopOptions, Trainer
from vlattn.training.optim import build_optimizer, parameter_groups
from vlattn.training.schedules import Constant


class Dictionary(nn.Module):
    """A module with a 2-D table that must not decay (as CATT's dictionaries) beside one that may."""

    no_weight_decay: ClassVar[tuple[str, ...]] = ("entries",)

    def __init__(self) -> None:
        super().__init__()
        self.entries = nn.Parameter(torch.randn(5, 4))
        self.proj = nn.Linear(4, 4)


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 4)
        self.memory = build_attention("memory", d_model=4, num_heads=2, options={"slots": 3})
        self.norm = nn.LayerNorm(4)
        self.dictionary = Dictionary()
        self.gate = nn.Parameter(torch.ones(()))


EXEMPT = {
    "memory.q_proj.bias", "memory.k_proj.bias", "memory.v_proj.bias", "memory.out_proj.bias",
    "memory.memory_keys", "memory.memory_values", "norm.weight", "norm.bias", "dictionary.entries",
    "dictionary.proj.bias", "gate",
}
DECAYED = {"embed.weight", "memory.q_proj.weight", "memory.k_proj.weight", "memory.v_proj.weight",
           "memory.out_proj.weight", "dictionary.proj.weight"}


def names(model: nn.Module, params: list[nn.Parameter]) -> set[str]:
    by_id = {id(p): name for name, p in model.named_parameters()}
    return {by_id[id(p)] for p in params}


def test_groups_by_module_type_dimension_and_declared_names() -> None:
    model = Toy()
    assert set(dict(model.named_parameters())) == EXEMPT | DECAYED  # the lists above cover the model
    decayed, exempt = parameter_groups(model, 0.01)
    assert (decayed["weight_decay"], exempt["weight_decay"]) == (0.01, 0.0)
    assert names(model, decayed["params"]) == DECAYED and names(model, exempt["params"]) == EXEMPT
    # without decay: one group, every parameter in model order (the optimiser of earlier versions)
    (single,) = parameter_groups(model, 0.0)
    assert single["params"] == list(model.parameters())


def test_a_2d_norm_parameter_is_exempt_by_its_module_type() -> None:
    class WideNorm(nn.LayerNorm):  # a norm whose gain is a matrix: exempt by type, not by dimension
        def __init__(self) -> None:
            super().__init__((2, 3))

    model = nn.Sequential(nn.Linear(3, 6, bias=False), WideNorm())
    decayed, exempt = parameter_groups(model, 0.1)
    assert names(model, decayed["params"]) == {"0.weight"}
    assert names(model, exempt["params"]) == {"1.weight", "1.bias"}


def test_decay_moves_only_decayed_parameters() -> None:
    torch.manual_seed(0)
    model = Toy()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = build_optimizer(model, (0.9, 0.98), weight_decay=0.1)
    for group in optimizer.param_groups:
        group["lr"] = 0.01
    loss = sum((p * 0.0).sum() for p in model.parameters())  # zero gradients: only decay acts
    loss.backward()
    optimizer.step()
    for name, p in model.named_parameters():
        if name in EXEMPT:
            assert torch.equal(p, before[name]), name
        else:  # L2 decay: the Adam step opposes the sign of each (non-zero) weight
            moved = p.detach() - before[name]
            nonzero = before[name] != 0
            assert (torch.sign(moved[nonzero]) == -torch.sign(before[name][nonzero])).all(), name


def trainer_for(model: nn.Module, weight_decay: float, betas=(0.9, 0.98)) -> Trainer:
    return Trainer(
        model=model, optimizer=build_optimizer(model, betas, weight_decay), schedule=Constant(1e-3),
        objective=lambda m, b: (m(b["x"]).sum(), {}), dataset=[torch.ones(2)] * 4,
        collate=lambda rows: {"x": torch.stack(rows)}, validate=None,
        write_checkpoint=lambda name, state: None,
        options=LoopOptions(stage="s", epochs=1, batch_size=2, seed=0, selection_metric="m"),
    )


def test_resume_keeps_the_configured_hyper_parameters(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Linear(2, 2)
    saved: dict[str, dict] = {}
    first = trainer_for(model, 0.1)
    first.write_checkpoint = lambda name, state: saved.update({name: state})
    first.fit(RunLog(tmp_path))
    state = saved["last"]
    assert [g["weight_decay"] for g in state["optimizer"]["param_groups"]] == [0.1, 0.0]
    resumed = trainer_for(model, 0.2, betas=(0.8, 0.9))
    resumed.restore(state)
    assert [g["weight_decay"] for g in resumed.optimizer.param_groups] == [0.2, 0.0]
    assert all(g["betas"] == (0.8, 0.9) for g in resumed.optimizer.param_groups)
    # switching decay off changes the groups: a one-line error, not a traceback
    with pytest.raises(VlattnError, match="optimizer does not match"):
        trainer_for(model, 0.0).restore(state)


def adam_by_formula(param: torch.Tensor, grads: list[torch.Tensor], lr: float, betas: tuple[float, float],
                    eps: float) -> torch.Tensor:
    """Kingma & Ba (2015), Algorithm 1, in float64: the parameter after one step per gradient."""
    param = param.double()
    m, v = torch.zeros_like(param), torch.zeros_like(param)
    for t, grad in enumerate(grads, start=1):
        m = betas[0] * m + (1 - betas[0]) * grad.double()
        v = betas[1] * v + (1 - betas[1]) * grad.double() ** 2
        param = param - lr * (m / (1 - betas[0] ** t)) / ((v / (1 - betas[1] ** t)).sqrt() + eps)
    return param


def test_the_fused_optimiser_takes_adams_steps() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    start = model.weight.detach().clone()
    optimizer = build_optimizer(model, (0.8, 0.9), eps=1e-6)
    assert all(group["fused"] for group in optimizer.param_groups)  # CPU parameters: PyTorch's fused kernel
    for group in optimizer.param_groups:
        group["lr"] = 0.01
    grads = [torch.randn(2, 3) for _ in range(3)]
    for grad in grads:
        model.weight.grad, model.bias.grad = grad.clone(), torch.zeros(2)
        optimizer.step()
    expected = adam_by_formula(start, grads, 0.01, (0.8, 0.9), 1e-6)
    torch.testing.assert_close(model.weight.detach().double(), expected, rtol=1e-6, atol=1e-7)


def test_a_checkpoint_of_the_unfused_optimiser_resumes_with_the_same_updates() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    grads = [[torch.randn_like(p) for p in model.parameters()] for _ in range(4)]

    def run(optimizer: torch.optim.Optimizer, params: list[nn.Parameter], steps: list) -> None:
        for step in steps:
            for p, g in zip(params, step):
                p.grad = g.clone()
            optimizer.step()

    unfused_model = nn.Linear(4, 3)
    unfused_model.load_state_dict(model.state_dict())
    unfused = torch.optim.Adam(unfused_model.parameters(), lr=0.01, betas=(0.9, 0.98))  # PyTorch's default kernel
    run(unfused, list(unfused_model.parameters()), grads)
    resumed = nn.Linear(4, 3)
    resumed.load_state_dict(model.state_dict())
    first = torch.optim.Adam(resumed.parameters(), lr=0.01, betas=(0.9, 0.98))
    run(first, list(resumed.parameters()), grads[:2])
    optimizer = build_optimizer(resumed, (0.9, 0.98))
    settings = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    optimizer.load_state_dict(first.state_dict())  # what Trainer.restore does, then its own settings again
    for group, values in zip(optimizer.param_groups, settings):
        group.update(values, lr=0.01)
    run(optimizer, list(resumed.parameters()), grads[2:])
    for a, b in zip(resumed.parameters(), unfused_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
