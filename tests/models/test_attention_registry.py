"""Every registered attention mechanism, at every site its capabilities allow, honours the shared Q-K-V
contract (``vlattn.attention.base``); MHA and additive attention match naive references; placements the
capabilities forbid are refused with a ConfigError naming the site."""

from __future__ import annotations

import math

import pytest
import torch
from registry_cases import D, H, Q_DIM, build_mechanism, call_for, cross_context, placement_id, placements
from torch import nn

from vlattn.attention import (
    ATTENTION,
    AdditiveAttention,
    AttentionContext,
    AttentionDims,
    AttentionOutput,
    KVCache,
    MultiHeadAttention,
    Site,
    StaticKVCache,
    build_attention,
    check_placement,
    reorder_state,
)
from vlattn.errors import ConfigError
from vlattn.layers import BoxGeometry

PLACEMENTS = placements()
UNORDERED = [p for p in PLACEMENTS if p[1] is not Site.DECODER_SELF]  # sets of regions / keys: no order
DECODER_SELF = [p for p in PLACEMENTS if p[1] is Site.DECODER_SELF]
CROSS = [p for p in PLACEMENTS if p[1] is Site.CROSS]


def over(cases: list[tuple[str, Site]]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("placement", cases, ids=[placement_id(p) for p in cases])


@pytest.fixture(params=PLACEMENTS, ids=[placement_id(p) for p in PLACEMENTS])
def placement(request: pytest.FixtureRequest) -> tuple[str, Site]:
    return request.param


def real_rows(call, out: torch.Tensor) -> torch.Tensor:
    """The outputs (n, d) of the queries that must not depend on padding."""
    return out[call.valid_queries]


# --- the contract, for every placement ------------------------------------------------------------------------


def test_every_mechanism_declares_options_and_capabilities() -> None:
    for name, cls in ATTENTION.items():
        assert issubclass(cls, nn.Module), name
        assert isinstance(cls.capabilities.sites, frozenset) and cls.capabilities.sites, name
        assert hasattr(cls, "Options"), name


def test_shapes_weights_and_one_return_type(placement: tuple[str, Site]) -> None:
    name, site = placement
    module, call = build_mechanism(name, site), call_for(name, site)
    fused = call.run(module)
    explicit = call.run(module, need_weights=True)
    assert isinstance(fused, AttentionOutput) and isinstance(explicit, AttentionOutput)
    assert fused.weights is None
    batch, queries = call.query.shape[:2]
    assert fused.out.shape == (batch, queries, module.out_dim)
    assert torch.isfinite(fused.out).all()
    weights = explicit.weights
    assert weights.shape[:3] == (batch, module.num_heads if hasattr(module, "num_heads") else 1, queries)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:3]))
    torch.testing.assert_close(explicit.out, fused.out)


def test_padded_keys_and_queries_change_nothing(placement: tuple[str, Site]) -> None:
    name, site = placement
    module, call = build_mechanism(name, site), call_for(name, site)
    padded = ~call.valid_keys  # (B, Nk)
    if site is Site.DECODER_SELF:  # causal: later positions must not reach earlier ones
        noisy = call.query.clone()
        noisy[:, 3:] = 100.0 * torch.randn_like(noisy[:, 3:])
        out = call.run(module, query=noisy, key=noisy, value=noisy).out
        torch.testing.assert_close(out[:, :3], call.run(module).out[:, :3])
        assert not torch.allclose(out[:, 3:], call.run(module).out[:, 3:])
        return
    key = call.key + 100.0 * torch.randn_like(call.key) * padded[..., None]
    changes = {"key": key, "value": key} if site is Site.CROSS else {"query": key, "key": key, "value": key}
    torch.testing.assert_close(real_rows(call, call.run(module, **changes).out), real_rows(call, call.run(module).out))
    # and the mask is real: without it, the same change alters real outputs
    unmasked = torch.ones_like(call.mask)
    assert not torch.allclose(call.run(module, mask=unmasked, **changes).out, call.run(module, mask=unmasked).out)


@over(UNORDERED)
def test_permuting_regions_permutes_outputs(placement: tuple[str, Site]) -> None:
    """Regions have no order: at encoder self-attention sites, permuting the regions (features, boxes, mask)
    permutes the outputs; at cross sites, permuting the keys leaves the outputs unchanged."""
    name, site = placement
    module, call = build_mechanism(name, site), call_for(name, site)
    order = torch.tensor([4, 0, 5, 2, 1, 3])
    if site is Site.CROSS:
        boxes = None if call.boxes is None else call.boxes[:, order]
        permuted = call.run(module, key=call.key[:, order], value=call.value[:, order], mask=call.mask[..., order],
                            context=cross_context(boxes, call.valid_keys[:, order]))
        torch.testing.assert_close(permuted.out, call.run(module).out)
        return
    real = call.valid_queries[:, order]
    boxes = call.boxes[:, order]
    context = AttentionContext(site, query_mask=real, geometry=BoxGeometry(boxes, real))
    x = call.query[:, order]
    permuted = call.run(module, query=x, key=x, value=x, mask=real[:, None, None, :], context=context).out
    torch.testing.assert_close(permuted[real], call.run(module).out[:, order][real])


@over(UNORDERED)  # (a causal query always sees itself)
def test_fully_masked_queries_agree_between_paths(placement: tuple[str, Site]) -> None:
    name, site = placement
    module, call = build_mechanism(name, site), call_for(name, site)
    batch, queries = call.query.shape[:2]
    keys = call.key.shape[1]
    per_query = call.mask.expand(batch, 1, queries, keys).clone()
    per_query[:, :, 0] = False  # query 0 attends to nothing
    fused, explicit = call.run(module, mask=per_query), call.run(module, mask=per_query, need_weights=True)
    assert torch.isfinite(fused.out).all() and torch.isfinite(explicit.out).all()
    torch.testing.assert_close(explicit.out, fused.out)
    assert (explicit.weights[:, :, 0, :keys] == 0).all()  # (columns past Nk: learned slots, never masked)
    torch.testing.assert_close(explicit.weights[:, :, 1:].sum(-1), torch.ones_like(explicit.weights[:, :, 1:, 0]))


def test_bias_has_effect_and_minus_inf_equals_mask(placement: tuple[str, Site]) -> None:
    name, site = placement
    module, call = build_mechanism(name, site), call_for(name, site)
    batch, queries, keys = call.query.shape[0], call.query.shape[1], call.key.shape[1]
    bias = torch.randn(batch, 1, queries, keys)
    assert not torch.allclose(call.run(module, bias=bias).out, call.run(module).out)
    dropped = torch.ones(batch, 1, 1, keys, dtype=torch.bool)
    dropped[..., 1] = False
    mask = dropped if call.mask is None else call.mask & dropped
    minus_inf = torch.zeros(batch, 1, 1, keys).masked_fill(~dropped, float("-inf"))
    torch.testing.assert_close(call.run(module, bias=minus_inf, mask=call.mask).out, call.run(module, mask=mask).out)


def test_gradients_reach_every_parameter_and_input(placement: tuple[str, Site]) -> None:
    name, site = placement
    module, call = build_mechanism(name, site).train(), call_for(name, site)
    query, key = call.query.clone().requires_grad_(), call.key.clone().requires_grad_()
    changes = {"key": key, "value": key} if site is Site.CROSS else {"query": key, "key": key, "value": key}
    if site is Site.CROSS:
        changes["query"] = query
    out = call.run(module, **changes).out
    out[call.valid_queries].square().sum().backward()
    for parameter_name, parameter in module.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, parameter_name
    assert key.grad.abs().sum() > 0
    if site is Site.CROSS:
        assert query.grad.abs().sum() > 0


def test_state_dict_round_trip(placement: tuple[str, Site]) -> None:
    name, site = placement
    module, other, call = build_mechanism(name, site, seed=0), build_mechanism(name, site, seed=5), call_for(name, site)
    assert not torch.allclose(other.state_dict()[next(iter(module.state_dict()))], module.state_dict()[next(iter(module.state_dict()))])
    other.load_state_dict(module.state_dict())
    torch.testing.assert_close(call.run(other).out, call.run(module).out)


def test_dropout_only_in_training(placement: tuple[str, Site]) -> None:
    name, site = placement
    module, call = build_mechanism(name, site, dropout=0.5), call_for(name, site)
    torch.testing.assert_close(call.run(module).out, call.run(module).out)
    module.train()
    assert not torch.allclose(call.run(module).out, call.run(module).out)


@over(DECODER_SELF)
def test_appending_cache_equals_causal_attention(placement: tuple[str, Site]) -> None:
    name, site = placement
    module, call = build_mechanism(name, site), call_for(name, site)
    x, length = call.query, call.query.shape[1]
    cache = KVCache()
    steps = [call.run(module, query=x[:, t:t + 1], key=x[:, t:t + 1], value=x[:, t:t + 1], mask=None, cache=cache).out
             for t in range(length)]
    assert len(cache) == length
    torch.testing.assert_close(torch.cat(steps, dim=1), call.run(module).out)


@over(CROSS)
def test_static_cache_projects_once(placement: tuple[str, Site]) -> None:
    name, site = placement
    module, call = build_mechanism(name, site), call_for(name, site)
    cache = StaticKVCache()
    first = call.run(module, cache=cache).out
    again = call.run(module, key=torch.zeros_like(call.key), value=torch.zeros_like(call.value), cache=cache).out
    torch.testing.assert_close(first, call.run(module).out)
    torch.testing.assert_close(again, first)  # the stored projections are used, the new keys never read


# --- capabilities and options --------------------------------------------------------------------------------


def test_unknown_names_and_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="model.x: unknown attention mechanism 'nope'; valid names: .*mha"):
        build_attention("nope", d_model=D, num_heads=H, where="model.x")
    with pytest.raises(ConfigError, match=r"model.x.options.slotz"):
        build_attention("memory", d_model=D, num_heads=H, options={"slotz": 3}, where="model.x")
    with pytest.raises(ConfigError, match=r"model.x.options.slots: must be >= 1, got 0"):
        build_attention("memory", d_model=D, num_heads=H, options={"slots": 0}, where="model.x")
    with pytest.raises(ConfigError, match=r"model.x.options.init: 'xavier' is not one of: paper, official"):
        build_attention("memory", d_model=D, num_heads=H, options={"init": "xavier"}, where="model.x")


@pytest.mark.parametrize(
    ("name", "site", "dims", "kwargs", "message"),
    [
        ("additive", Site.ENCODER_SELF, AttentionDims(16, 1), {}, "is not allowed at encoder_self sites"),
        ("additive", Site.DECODER_SELF, AttentionDims(16, 1), {}, "is not allowed at decoder_self sites"),
        ("mha", Site.CROSS, AttentionDims(16, 3), {}, "not divisible by num_heads 3"),
        ("mha", Site.CROSS, AttentionDims(16, 4, query_dim=12), {}, "queries and keys of one size"),
    ],
)
def test_placements_the_capabilities_forbid_are_refused(name, site, dims, kwargs, message) -> None:
    with pytest.raises(ConfigError, match=rf"model\.site: attention {name!r} .*{message}"):
        check_placement(name, dims, site=site, where="model.site", **kwargs)


def test_capabilities_refuse_uncached_and_geometry_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    from vlattn.attention.base import Capabilities

    monkeypatch.setattr(MultiHeadAttention, "capabilities", Capabilities(cacheable=False, needs_geometry=True))
    with pytest.raises(ConfigError, match="needs box geometry"):
        check_placement("mha", AttentionDims(16, 4), site=Site.CROSS, where="s")
    with pytest.raises(ConfigError, match="does not support the incremental"):
        check_placement("mha", AttentionDims(16, 4), site=Site.DECODER_SELF, where="s", has_geometry=True, cached=True)


# --- references computed another way ---------------------------------------------------------------------------


def naive_attention(module: MultiHeadAttention, q, k, v, mask=None, bias=None) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k) + bias) V written out head by head."""
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
    attention = build_mechanism("mha", Site.CROSS)
    call = call_for("mha", Site.CROSS)
    bias = torch.randn(3, H, 4, 6)
    with torch.no_grad():
        expected = naive_attention(attention, call.query, call.key, call.value, mask=call.mask, bias=bias)
        torch.testing.assert_close(call.run(attention, bias=bias).out, expected)
        out, weights = call.run(attention, bias=bias, need_weights=True)
    torch.testing.assert_close(out, expected)
    assert (weights[2, :, :, 4:] == 0).all()


def test_additive_attention_matches_the_up_down_equations() -> None:
    """a_i = w_a^T tanh(W_va v_i + W_ha h) (Eq. 3: no bias in w_a); alpha = softmax(a); v_hat = sum_i alpha_i v_i
    (one query at a time)."""
    attention = build_mechanism("additive", Site.CROSS)
    assert isinstance(attention, AdditiveAttention) and attention.out_dim == D and attention.score.bias is None
    call = call_for("additive", Site.CROSS)
    with torch.no_grad():
        out = call.run(attention).out
        for b in range(3):
            for i in range(4):
                h, real = call.query[b, i], call.valid_keys[b]
                v = call.key[b, real]
                scores = torch.stack([
                    attention.score.weight[0] @ torch.tanh(attention.key_proj(vi) + attention.query_proj(h)) for vi in v
                ])
                expected = torch.softmax(scores, 0) @ v
                torch.testing.assert_close(out[b, i], expected)
    assert call.query.shape[-1] == Q_DIM != D


def test_reorder_state_selects_rows_of_nested_tensors_caches_and_dataclasses() -> None:
    from vlattn.models import LayerCache

    cache = KVCache(torch.arange(3.0).view(3, 1, 1, 1), torch.arange(3.0).view(3, 1, 1, 1) + 10)
    geometry = BoxGeometry(torch.rand(3, 2, 4))
    relative = geometry.relative
    state = {"memory": torch.arange(3), "cache": [LayerCache(cache, StaticKVCache())], "n": 4, "geometry": geometry}
    out = reorder_state(state, torch.tensor([2, 2, 0]))
    assert out["memory"].tolist() == [2, 2, 0] and out["n"] == 4
    assert out["cache"][0].self_attention.value.flatten().tolist() == [12.0, 12.0, 10.0]
    assert isinstance(out["cache"][0].cross, StaticKVCache) and out["cache"][0].cross.key is None
    assert cache.key.flatten().tolist() == [0.0, 1.0, 2.0]
    torch.testing.assert_close(out["geometry"].relative, relative[[2, 2, 0]])


def test_reordering_an_appending_cache_alternates_two_buffers() -> None:
    """Without gradients a reorder gathers into the buffer of the cache reordered two steps before once that cache
    is gone (no new buffer per decoding step), never while it lives; the rows follow every reorder."""
    def values(cache: KVCache) -> list[float]:
        return cache.key.flatten().tolist()

    cache = KVCache()
    cache.fetch(lambda: (torch.arange(3.0).view(3, 1, 1, 1), torch.arange(3.0).view(3, 1, 1, 1) + 10))
    first = cache.buffer
    once = cache.reorder(torch.tensor([2, 0, 1]))
    once.fetch(lambda: (torch.full((3, 1, 1, 1), 5.0), torch.full((3, 1, 1, 1), 6.0)))
    kept = once.reorder(torch.tensor([1, 1, 0]))  # `cache` still lives: a new buffer
    assert kept.buffer is not first and values(cache) == [0.0, 1.0, 2.0]
    del cache, kept
    twice = once.reorder(torch.tensor([1, 1, 0]))
    assert twice.buffer is first and values(twice) == [0.0, 5.0, 0.0, 5.0, 2.0, 5.0]
    assert twice.value[:, 0, 0].flatten().tolist() == [10.0, 10.0, 12.0]


def test_cached_self_attention_projects_queries_keys_and_values_in_one_product() -> None:
    """Plain MHA through an appending cache uses the joined projection (kept in the cache); outputs, cached keys and
    values and gradients equal those of the separate projections (a subclass overriding a projection step keeps
    them separate)."""

    class Separate(MultiHeadAttention):
        def project_query(self, query, context):
            return super().project_query(query, context)

    torch.manual_seed(0)
    joined = MultiHeadAttention(AttentionDims(16, 4, 0.0))
    separate = Separate(AttentionDims(16, 4, 0.0))
    separate.load_state_dict(joined.state_dict())
    assert joined.joins_projections and not separate.joins_projections
    x = torch.randn(2, 3, 16)
    caches = KVCache(), KVCache()
    for t in range(3):
        step = x[:, t : t + 1]
        outputs = [module(step, step, step, cache=cache).out for module, cache in zip((joined, separate), caches)]
        torch.testing.assert_close(outputs[0], outputs[1])
    torch.testing.assert_close(caches[0].key, caches[1].key)
    torch.testing.assert_close(caches[0].value, caches[1].value)
    assert caches[0].projection is not None and caches[1].projection is None
    grads = []
    for module in (joined, separate):
        cache = KVCache()
        sum(module(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache).out.sum() for t in range(3)).backward()
        grads.append([p.grad for p in (module.k_proj.weight, module.v_proj.bias, module.q_proj.weight)])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)
