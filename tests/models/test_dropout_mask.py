"""``model.dropout_mask``: every model's dropout is :class:`vlattn.layers.dropout.Dropout`, its mask torch's
Bernoulli draw (exactly ``nn.Dropout``) or uniform draws compared with p, set model-wide by ``set_dropout_mask``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vlattn.layers.dropout import Dropout, set_dropout_mask
from vlattn.shipped_presets import names
from vlattn.tasks import task_of
from vlattn.validation import load_valid_config


def test_uniform_mask_is_the_comparison_and_scales_survivors() -> None:
    x = torch.arange(1.0, 100001.0).reshape(200, 500)
    layer = Dropout(0.3, mask="uniform").train()
    torch.manual_seed(5)
    out = layer(x)
    torch.manual_seed(5)
    keep = torch.rand(200, 500) >= 0.3  # the same draws, compared by hand
    assert torch.allclose(out, torch.where(keep, x / 0.7, torch.zeros_like(x)))
    assert abs(keep.float().mean().item() - 0.7) < 0.01  # P(keep) = 1 - p


def test_bernoulli_mask_is_torchs_dropout() -> None:
    x = torch.randn(40, 30)
    torch.manual_seed(3)
    ours = Dropout(0.4).train()(x)
    torch.manual_seed(3)
    assert torch.equal(ours, nn.Dropout(0.4).train()(x))


def test_gradient_is_the_mask_and_eval_is_identity() -> None:
    x = torch.randn(30, 20, requires_grad=True)
    layer = Dropout(0.5, mask="uniform").train()
    out = layer(x)
    out.sum().backward()
    assert torch.equal(x.grad, (out != 0).float() * 2.0)
    assert layer.eval()(x) is x
    assert Dropout(0.0, mask="uniform").train()(x) is x


def test_set_model_wide_without_replacing_a_module() -> None:
    model = nn.Sequential(nn.Linear(2, 2), Dropout(0.2), nn.Sequential(Dropout(0.4)))
    before = list(model.modules())
    assert set_dropout_mask(model, "uniform") is model
    assert list(model.modules()) == before  # the same objects, in place
    assert [(m.p, m.mask) for m in model.modules() if isinstance(m, Dropout)] == [(0.2, "uniform"), (0.4, "uniform")]
    assert "mask=uniform" in repr(model[1])
    with pytest.raises(ValueError, match="unknown dropout mask 'gaussian'"):
        set_dropout_mask(model, "gaussian")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown dropout mask"):
        Dropout(0.1, mask="gaussian")  # type: ignore[arg-type]


@pytest.mark.parametrize("preset", names())
def test_every_dropout_of_every_preset_model_takes_the_configured_mask(preset: str) -> None:
    cfg = load_valid_config(preset, ["model.dropout_mask=uniform"])
    with torch.device("meta"):
        model = task_of(cfg.task).create_model(cfg, vocab_size=40, num_answers=7 if cfg.task == "vqa" else None)
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    # no plain nn.Dropout the option would miss; every one set to the config's mask
    assert dropouts and all(type(m) is Dropout and m.mask == "uniform" for m in dropouts)
