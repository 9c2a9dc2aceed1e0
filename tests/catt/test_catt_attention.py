"""The CATT mechanisms (Eq. 6-7, Fig. 4; supplementary Eq. 23-24): checked against the inner attention run by hand,
the span of the dictionary values, gradients into the dictionary, parameter sharing and counts. The shared Q-K-V
contract (masks, caches, permutations, ...) is the registry battery's (tests/models/test_attention_registry.py)."""

from __future__ import annotations

import pytest
import torch

from vlattn.attention import AdditiveAttention, MultiHeadAttention, Site, build_attention
from vlattn.errors import ConfigError

D, H, K = 16, 4, 5


def catt(name: str = "catt", seed: int = 0, **options) -> torch.nn.Module:
    torch.manual_seed(seed)
    kwargs = {"query_dim": 12} if name == "catt_additive" else {"num_heads": H}
    options = {"dictionary": {"size": K}, **options}
    module = build_attention(name, d_model=D if name == "catt" else 8, key_dim=None if name == "catt" else D,
                             options=options, **kwargs)
    with torch.no_grad():
        module.dictionary.entries.normal_()  # entries of a trained dictionary, not the U(0, 0.01) start
    return module.eval()


def inputs(query_dim: int = D, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(3, 4, query_dim, generator=generator)
    key = torch.randn(3, 6, D, generator=generator)
    mask = torch.ones(3, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 4:] = False
    return query, key, mask


def test_output_is_the_inner_attention_over_the_sample_and_over_the_dictionary() -> None:
    """Shared: [MHA(q, K_I, V_I); MHA(q, D, D)] with one MHA module (Eq. 5-7)."""
    module = catt()
    query, key, mask = inputs()
    out = module(query, key, key, mask=mask).out
    entries = module.dictionary.entries.expand(3, K, D)
    inner = module.in_sample
    with torch.no_grad():
        torch.testing.assert_close(out[..., :D], inner(query, key, key, mask=mask).out)
        torch.testing.assert_close(out[..., D:], inner(query, entries, entries).out)


def test_cross_sample_output_lies_in_the_span_of_the_dictionary_values() -> None:
    """Additive CS-ATT returns sum_k a_k d_k over the raw entries: a convex combination of the dictionary rows with
    weights softmax_k(w^T tanh(W_k d_k + W_q q)) (Eq. 7 with Eq. 23's scores)."""
    module = catt("catt_additive")
    query, key, mask = inputs(12)
    cross = module(query, key, key, mask=mask).out[..., D:]  # X^, (B, Nq, D)
    entries = module.dictionary.entries.detach()  # (K, D), K < D: a 5-d subspace of R^16
    weights = torch.linalg.lstsq(entries.T, cross.reshape(-1, D).T.detach()).solution.T  # (B*Nq, K)
    torch.testing.assert_close(weights @ entries, cross.reshape(-1, D).detach(), atol=1e-5, rtol=1e-5)
    attention = module.cross_sample_attention
    scores = attention.score(torch.tanh(attention.key_proj(entries)[None, None] + attention.query_proj(query)[:, :, None]))
    torch.testing.assert_close(weights, scores.squeeze(-1).softmax(-1).reshape(-1, K).detach(), atol=1e-5, rtol=1e-5)
    # MHA (Eq. 24): before W^H, head h returns a convex combination of the entries' values D W_V^h, with weights
    # softmax(q W_Q^h (D W_K^h)^T / sqrt(d_k)); 3 entries in 4-d heads, so the combination is identifiable
    module = catt(share=False, dictionary={"size": 3})
    query, key, mask = inputs()
    cross = module(query, key, key, mask=mask).out[..., D:].detach()
    attention = module.cross_sample_attention
    with torch.no_grad():
        heads = torch.linalg.solve(attention.out_proj.weight, (cross - attention.out_proj.bias).reshape(-1, D).T).T
        entries = module.dictionary.entries
        values, keys, queries = attention.v_proj(entries), attention.k_proj(entries), attention.q_proj(query)
    d_k = D // H
    for h in range(H):
        cols = slice(h * d_k, (h + 1) * d_k)
        head_weights = torch.linalg.lstsq(values[:, cols].T, heads[:, cols].T).solution.T  # (B*Nq, 3)
        torch.testing.assert_close(head_weights @ values[:, cols], heads[:, cols], atol=1e-4, rtol=1e-4)
        expected = (queries[..., cols] @ keys[:, cols].T / d_k**0.5).softmax(-1).reshape(-1, 3)
        torch.testing.assert_close(head_weights, expected, atol=1e-4, rtol=1e-4)


def test_sample_keys_never_reach_the_cross_sample_output() -> None:
    module = catt(fusion="concat")
    query, key, mask = inputs()
    other = torch.randn_like(key)
    first, second = module(query, key, key, mask=mask).out, module(query, other, other, mask=mask).out
    torch.testing.assert_close(first[..., D:], second[..., D:])
    assert not torch.allclose(first[..., :D], second[..., :D])


@pytest.mark.parametrize("name", ["catt", "catt_additive"])
def test_dictionary_is_learned_end_to_end(name: str) -> None:
    module = catt(name).train()
    query, key, mask = inputs(12 if name == "catt_additive" else D)
    before = module.dictionary.entries.detach().clone()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    module(query, key, key, mask=mask).out.square().sum().backward()
    assert module.dictionary.entries.grad.abs().min() > 0  # every entry receives a gradient
    optimizer.step()
    assert (module.dictionary.entries - before).abs().min() > 0


def test_shared_attention_is_one_parameter_set() -> None:
    shared, separate = catt(share=True), catt(share=False)
    assert shared.cross_sample is None and shared.cross_sample_attention is shared.in_sample
    names = {name for name, _ in shared.named_parameters()}
    assert not any(name.startswith("cross_sample") for name in names)
    assert {name for name, _ in separate.named_parameters()} - names == {
        f"cross_sample.{p}_proj.{w}" for p in ("q", "k", "v", "out") for w in ("weight", "bias")
    }
    # a change of the one set moves both outputs; unshared, only IS-ATT moves
    query, key, mask = inputs()
    for module, cross_moves in ((shared, True), (separate, False)):
        before = module(query, key, key, mask=mask).out
        with torch.no_grad():
            module.in_sample.q_proj.weight.add_(0.5)
        after = module(query, key, key, mask=mask).out
        assert not torch.allclose(after[..., :D], before[..., :D])
        assert torch.allclose(after[..., D:], before[..., D:]) is not cross_moves


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("size", [5, 100, 1000])
def test_shared_catt_adds_only_the_dictionary(size: int) -> None:
    """Shared, concat: parameters = the inner attention's + K x d (Sec. 3.3: "the increments ... only come from the
    global ... dictionaries"); concat_linear adds the 2d x d + d projection; unshared, a second attention."""
    mha = build_attention("mha", d_model=D, num_heads=H)
    assert count(catt(dictionary={"size": size})) == count(mha) + size * D
    assert count(catt(dictionary={"size": size}, fusion="concat_linear")) == count(mha) + size * D + 2 * D * D + D
    assert count(catt(dictionary={"size": size}, share=False)) == 2 * count(mha) + size * D
    additive = build_attention("additive", d_model=8, query_dim=12, key_dim=D)
    assert count(catt("catt_additive", dictionary={"size": size}, share=True)) == count(additive) + size * D
    assert count(catt("catt_additive", dictionary={"size": size})) == 2 * count(additive) + size * D


def test_out_dim_and_weights() -> None:
    module = catt()
    query, key, mask = inputs()
    out, weights = module(query, key, key, mask=mask, need_weights=True)
    assert module.out_dim == 2 * D and out.shape == (3, 4, 2 * D)
    assert weights.shape == (3, H, 4, 6) and (weights[1, ..., 4:] == 0).all()  # IS-ATT's weights over the sample
    assert catt(fusion="concat_linear").out_dim == D
    assert catt("catt_additive").out_dim == 2 * D and isinstance(catt("catt_additive").in_sample, AdditiveAttention)


def test_dictionary_entries_are_exempt_from_weight_decay() -> None:
    from vlattn.training.optim import decay_exempt

    module = catt()
    assert id(module.dictionary.entries) in decay_exempt(module)
    assert id(module.in_sample.q_proj.weight) not in decay_exempt(module)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dictionary": {"size": 0}}, r"dictionary\.size: must be >= 1"),
        ({"dictionary": {"init": "file"}}, r"dictionary\.path: init 'file' needs the path"),
        ({"dictionary": {"init": "zeros"}}, r"dictionary\.init: 'zeros' is not one of: kmeans, random, file"),
        ({"fusion": "sum"}, r"fusion: 'sum' is not one of: concat, concat_linear"),
        ({"source": "audio"}, r"source: 'audio' is not one of: image, word"),
    ],
)
def test_option_errors_name_the_key(options, message) -> None:
    with pytest.raises(ConfigError, match=rf"model\.x\.options\.{message}"):
        build_attention("catt", d_model=D, num_heads=H, options=options, where="model.x")


def test_capabilities_follow_the_inner_attention() -> None:
    from vlattn.attention import ATTENTION

    assert ATTENTION["catt"].capabilities == MultiHeadAttention.capabilities
    assert ATTENTION["catt_additive"].capabilities.sites == frozenset({Site.CROSS})
    assert ATTENTION["catt_additive"].capabilities.query_dim_differs
