"""Every registered attention mechanism honours the shared Q-K-V contract; MHA matches a naive reference."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from vlattn.attention import ATTENTION, KVCache, MultiHeadAttention, StaticKVCache, build_attention, reorder_state

D, H = 16, 4


def make(name: str, dropout: float = 0.0, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_attention(name, d_model=D, num_heads=H, dropout=dropout).eval()


def qkv(batch: int = 2, nq: int = 3, nk: int = 5, seed: int = 1) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, n, D, generator=generator) for n in (nq, nk, nk))


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(KeyError, match="valid names: .*mha"):
        build_attention("nope", d_model=D, num_heads=H)


def test_shapes_and_weights(attention_name: str) -> None:
    attention = make(attention_name)
    q, k, v = qkv()
    assert attention(q, k, v).shape == (2, 3, D)
    out, weights = attention(q, k, v, need_weights=True)
    assert out.shape == (2, 3, D) and weights.shape[:3] == (2, H, 3)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, H, 3))
    torch.testing.assert_close(out, attention(q, k, v))


def test_masked_keys_do_not_matter(attention_name: str) -> None:
    attention = make(attention_name)
    q, k, v = qkv()
    mask = torch.tensor([[True, True, True, False, False], [True, False, True, True, False]])[:, None, None, :]
    k2, v2 = k.clone(), v.clone()
    k2[~mask[:, 0, 0]] = 100.0
    v2[~mask[:, 0, 0]] = -100.0
    torch.testing.assert_close(attention(q, k, v, mask=mask), attention(q, k2, v2, mask=mask))
    assert not torch.allclose(attention(q, k, v), attention(q, k2, v2))


def test_bias_has_effect(attention_name: str) -> None:
    attention = make(attention_name)
    q, k, v = qkv()
    bias = torch.randn(2, H, 3, 5)
    assert not torch.allclose(attention(q, k, v), attention(q, k, v, bias=bias))
    # a bias of -inf on a key acts like masking it out
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    mask[..., 1] = False
    minus_inf = torch.zeros(2, 1, 1, 5).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(attention(q, k, v, bias=minus_inf), attention(q, k, v, mask=mask))


def test_gradients_flow(attention_name: str) -> None:
    attention = make(attention_name)
    q, k, v = (t.requires_grad_() for t in qkv())
    attention(q, k, v).square().sum().backward()
    for name, parameter in attention.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    assert all(t.grad.abs().sum() > 0 for t in (q, k, v))


def test_state_dict_round_trip(attention_name: str) -> None:
    attention, other = make(attention_name, seed=0), make(attention_name, seed=5)
    q, k, v = qkv()
    other.load_state_dict(attention.state_dict())
    torch.testing.assert_close(other(q, k, v), attention(q, k, v))


def test_appending_cache_equals_causal_attention(attention_name: str) -> None:
    attention = make(attention_name)
    x, _, _ = qkv(nq=6)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    full = attention(x, x, x, mask=causal)
    cache = KVCache()
    steps = [attention(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache) for t in range(6)]
    assert len(cache) == 6
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_static_cache_projects_once(attention_name: str) -> None:
    attention = make(attention_name)
    q, k, v = qkv()
    mask = torch.tensor([True, True, False, True, True])[None, None, None, :]
    cache = StaticKVCache()
    first = attention(q, k, v, mask=mask, cache=cache)
    # later calls reuse the stored projections: the key/value arguments are no longer read
    again = attention(q, torch.zeros_like(k), torch.zeros_like(v), mask=mask, cache=cache)
    torch.testing.assert_close(first, attention(q, k, v, mask=mask))
    torch.testing.assert_close(again, first)


def test_dropout_only_in_training(attention_name: str) -> None:
    attention = make(attention_name, dropout=0.5)
    q, k, v = qkv()
    torch.testing.assert_close(attention(q, k, v), attention(q, k, v))
    attention.train()
    assert not torch.allclose(attention(q, k, v), attention(q, k, v))
    out, _ = attention(q, k, v, need_weights=True)
    assert not torch.allclose(out, attention.eval()(q, k, v))


def naive_attention(module: MultiHeadAttention, q, k, v, mask=None, bias=None) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k) + bias) V written out head by head."""
    batch, nq, _ = q.shape
    d_k = D // H
    heads = []
    for h in range(H):
        cols = slice(h * d_k, (h + 1) * d_k)
        qh = q @ module.q_proj.weight[cols].T + module.q_proj.bias[cols]
        kh = k @ module.k_proj.weight[cols].T + module.k_proj.bias[cols]
        vh = v @ module.v_proj.weight[cols].T + module.v_proj.bias[cols]
        logits = qh @ kh.transpose(1, 2) / math.sqrt(d_k)  # (B, Nq, Nk)
        if bias is not None:
            logits = logits + bias[:, h]
        if mask is not None:
            logits = logits.masked_fill(~mask[:, 0], float("-inf"))
        heads.append(torch.softmax(logits, dim=-1) @ vh)
    return module.out_proj(torch.cat(heads, dim=-1))


def test_mha_matches_naive_reference() -> None:
    attention = make("mha")
    q, k, v = qkv()
    mask = torch.tensor([[True] * 5, [True, True, False, True, False]])[:, None, None, :]
    bias = torch.randn(2, H, 3, 5)
    with torch.no_grad():
        expected = naive_attention(attention, q, k, v, mask=mask, bias=bias)
        torch.testing.assert_close(attention(q, k, v, mask=mask, bias=bias), expected)
        out, weights = attention(q, k, v, mask=mask, bias=bias, need_weights=True)
        torch.testing.assert_close(out, expected)
    assert (weights[1, :, :, 2] == 0).all() and (weights[1, :, :, 4] == 0).all()


def test_reorder_state_selects_rows_of_nested_tensors_and_caches() -> None:
    cache = KVCache(torch.arange(3.0).view(3, 1, 1, 1), torch.arange(3.0).view(3, 1, 1, 1) + 10)
    state = {"memory": torch.arange(3), "cache": [{"self": cache, "cross": StaticKVCache()}], "n": 4}
    out = reorder_state(state, torch.tensor([2, 2, 0]))
    assert out["memory"].tolist() == [2, 2, 0] and out["n"] == 4
    assert out["cache"][0]["self"].value.flatten().tolist() == [12.0, 12.0, 10.0]
    assert isinstance(out["cache"][0]["cross"], StaticKVCache) and out["cache"][0]["cross"].key is None
    assert cache.key.flatten().tolist() == [0.0, 1.0, 2.0]


def test_registry_holds_modules() -> None:
    assert all(issubclass(cls, nn.Module) for cls in ATTENTION.values())
