"""``model.dropout_mask: uniform``: inverted dropout from uniform draws compared with p, swapped in for nn.Dropout."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vlattn.validation import load_valid_config
from vlattn.layers.dropout import UniformDropout, use_dropout_mask
from vlattn.data.vocab import Vocabulary
from vlattn.tasks.captioning import build_model


def test_mask_is_the_uniform_comparison_and_scales_survivors() -> None:
    x = torch.arange(1.0, 100001.0).reshape(200, 500)
    layer = UniformDropout(0.3).train()
    torch.manual_seed(5)
    out = layer(x)
    torch.manual_seed(5)
    keep = torch.rand(200, 500) >= 0.3  # the same draws, compared by hand
    assert torch.allclose(out, torch.where(keep, x / 0.7, torch.zeros_like(x)))
    assert abs(keep.float().mean().item() - 0.7) < 0.01  # P(keep) = 1 - p


def test_gradient_is_the_mask_and_eval_is_identity() -> None:
    x = torch.randn(30, 20, requires_grad=True)
    layer = UniformDropout(0.5).train()
    out = layer(x)
    out.sum().backward()
    assert torch.equal(x.grad, (out != 0).float() * 2.0)
    assert layer.eval()(x) is x
    assert UniformDropout(0.0).train()(x) is x


def test_swapped_into_every_dropout_module() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.2), nn.Sequential(nn.Dropout(0.4)))
    use_dropout_mask(model, "uniform")
    layers = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert [type(m) for m in layers] == [UniformDropout] * 2 and [m.p for m in layers] == [0.2, 0.4]
    with pytest.raises(ValueError, match="unknown dropout mask"):
        use_dropout_mask(model, "gaussian")  # type: ignore[arg-type]


def test_config_key_reaches_the_captioner() -> None:
    sizes = ["model.feature_dim=8", "model.d_model=16", "model.num_heads=2", "model.d_ff=32"]
    vocab = Vocabulary(["a", "b", "c"])
    uniform = build_model(load_valid_config(None, [*sizes, "model.dropout_mask=uniform"]), vocab)
    plain = build_model(load_valid_config(None, sizes), vocab)
    assert {type(m) for m in uniform.modules() if isinstance(m, nn.Dropout)} == {UniformDropout}
    assert {type(m) for m in plain.modules() if isinstance(m, nn.Dropout)} == {nn.Dropout}
