"""Every registered feed-forward network honours the position-wise contract of ``vlattn.layers.feedforward``:
shapes, one position's output depends on that position only, gradients reach every parameter, state-dict
round trip, dropout only in training, options validated with the key named."""

from __future__ import annotations

import pytest
import torch
from registry_cases import D, build_feed_forward_case, feed_forward_names
from torch import nn

from vlattn.errors import ConfigError
from vlattn.layers import FEED_FORWARD, build_feed_forward

NAMES = feed_forward_names()


@pytest.fixture(params=NAMES)
def name(request: pytest.FixtureRequest) -> str:
    return request.param


def test_every_feed_forward_declares_options() -> None:
    for registered, cls in FEED_FORWARD.items():
        assert issubclass(cls, nn.Module) and hasattr(cls, "Options"), registered


def test_shape_and_position_wise(name: str) -> None:
    module, x = build_feed_forward_case(name), torch.randn(3, 6, D)
    out = module(x)
    assert out.shape == x.shape and torch.isfinite(out).all()
    changed = x.clone()
    changed[1, 2] += torch.randn(D)
    moved = module(changed)
    keep = torch.ones(3, 6, dtype=torch.bool)
    keep[1, 2] = False
    torch.testing.assert_close(moved[keep], out[keep])
    assert not torch.allclose(moved[1, 2], out[1, 2])
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    torch.testing.assert_close(module(x[:, order]), out[:, order])


def test_gradients_reach_every_parameter_and_input(name: str) -> None:
    module = build_feed_forward_case(name).train()
    x = torch.randn(3, 6, D, requires_grad=True)
    module(x).square().sum().backward()
    for parameter_name, parameter in module.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, parameter_name
    assert x.grad.abs().sum() > 0


def test_state_dict_round_trip(name: str) -> None:
    module, other, x = build_feed_forward_case(name), build_feed_forward_case(name, seed=4), torch.randn(2, 5, D)
    assert not torch.allclose(other(x), module(x))
    other.load_state_dict(module.state_dict())
    torch.testing.assert_close(other(x), module(x))


def test_dropout_only_in_training(name: str) -> None:
    module, x = build_feed_forward_case(name, dropout=0.5), torch.randn(2, 5, D)
    torch.testing.assert_close(module(x), module(x))
    module.train()
    assert not torch.allclose(module(x), module(x))


def test_unknown_options_are_config_errors(name: str) -> None:
    with pytest.raises(ConfigError, match=r"model\.feed_forward\.options\.nope"):
        build_feed_forward(name, D, 2 * D, options={"nope": 1}, where="model.feed_forward")
