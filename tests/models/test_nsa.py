"""NSA (NG-SAN Sec. 4.1, Eq. 6-7; Tables 2-3): a naive loop-based reference of the equations for every
normaliser and every choice of normalised projections, masked statistics, padding invariance, equivariance,
parameters and placement."""

from __future__ import annotations

import math

import pytest
import torch
from registry_cases import D, build_mechanism, naive_attention_loops, self_attention_call

from vlattn.attention import AttentionDims, Site, build_attention, check_placement
from vlattn.validation import valid_config
from vlattn.errors import ConfigError
from vlattn.layers.masked_norm import BATCH_NORM_MOMENTUM, MaskedBatchNorm

VARIANTS = [  # every normaliser x every choice of normalised projections; gamma/beta with both
    {"norm": norm, "normalize": normalize, "affine": normalize == "both"}
    for norm in ("instance", "batch", "layer")
    for normalize in ("query", "key", "both")
]


def variant_id(options: dict) -> str:
    return f"{options['norm']}-{options['normalize']}{'-affine' if options['affine'] else ''}"


def nsa(seed: int = 0, training: bool = False, **options) -> torch.nn.Module:
    module = build_mechanism("nsa", Site.ENCODER_SELF, seed=seed, **options)
    for name, parameter in module.named_parameters():  # non-trivial gamma/beta
        if name.endswith("norm.weight") or name.endswith("norm.bias"):
            with torch.no_grad():
                parameter.copy_(torch.rand_like(parameter) + 0.5 if name.endswith("weight") else torch.randn_like(parameter))
    return module.train(training)


def linear(x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
    return x @ layer.weight.T + (0.0 if layer.bias is None else layer.bias)


def naive_norm(x: torch.Tensor, real: torch.Tensor, norm: str, eps: float, gamma, beta, stats=None) -> torch.Tensor:
    """Eq. 6 (instance), BN and LN written as loops over instances, channels and regions."""
    batch, count, channels = x.shape
    x = x.tolist()
    out = [[[0.0] * channels for _ in range(count)] for _ in range(batch)]
    for b in range(batch):
        for t in range(count):
            for c in range(channels):
                if norm == "layer":
                    values = x[b][t]
                elif norm == "instance":
                    values = [x[b][s][c] for s in range(count) if real[b, s]]
                else:
                    values = [x[a][s][c] for a in range(batch) for s in range(count) if real[a, s]]
                mean = sum(values) / len(values)
                var = sum((v - mean) ** 2 for v in values) / len(values)
                if stats is not None:  # BN in eval mode: running statistics
                    mean, var = float(stats[0][c]), float(stats[1][c])
                value = (x[b][t][c] - mean) / math.sqrt(var + eps)
                out[b][t][c] = value if gamma is None else value * float(gamma[c]) + float(beta[c])
    return torch.tensor(out)


def naive_nsa(module, x: torch.Tensor, real: torch.Tensor, options: dict) -> torch.Tensor:
    """softmax(Norm(Q) Norm(K)^T / sqrt(d_k)) V head by head, padded keys excluded, Eq. 7."""
    stats = None
    if options["norm"] == "batch" and not module.training:
        stats = (module.query_norm or module.key_norm).running_mean, (module.query_norm or module.key_norm).running_var
    q, k, v = linear(x, module.q_proj), linear(x, module.k_proj), linear(x, module.v_proj)
    for which, norm in (("q", module.query_norm), ("k", module.key_norm)):
        if norm is not None:
            normed = naive_norm(q if which == "q" else k, real, options["norm"], 1e-5, norm.weight, norm.bias, stats)
            q, k = (normed, k) if which == "q" else (q, normed)
    return naive_attention_loops(q, k, v, real, module.out_proj)


@pytest.mark.parametrize("options", VARIANTS, ids=variant_id)
def test_nsa_matches_naive_reference(options: dict) -> None:
    call = self_attention_call(Site.ENCODER_SELF)
    module = nsa(training=options["norm"] == "batch", **options)
    real = call.valid_queries
    with torch.no_grad():
        expected = naive_nsa(module, call.query, real, options)
        out = call.run(module).out
    torch.testing.assert_close(out[real], expected[real], atol=1e-5, rtol=1e-4)


def test_batch_norm_running_statistics_are_masked_and_used_in_eval() -> None:
    call = self_attention_call(Site.ENCODER_SELF)
    module = nsa(training=True, norm="batch", affine=True)
    with torch.no_grad():
        call.run(module)
        queries = linear(call.query, module.q_proj)[call.valid_queries]  # (n, D) real regions only
        norm = module.query_norm
        assert isinstance(norm, MaskedBatchNorm)
        torch.testing.assert_close(norm.running_mean, BATCH_NORM_MOMENTUM * queries.mean(0))
        expected_var = (1 - BATCH_NORM_MOMENTUM) + BATCH_NORM_MOMENTUM * queries.var(0, unbiased=True)
        torch.testing.assert_close(norm.running_var, expected_var)
        module.eval()
        expected = naive_nsa(module, call.query, call.valid_queries, {"norm": "batch"})
        torch.testing.assert_close(call.run(module).out[call.valid_queries], expected[call.valid_queries], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("affine", [False, True])
def test_normalised_queries_have_instance_statistics(affine: bool) -> None:
    """Over the real regions of each image, every channel of Q_hat has mean beta and variance gamma^2
    (0 and 1 without the affine transformation); padded regions do not count."""
    call = self_attention_call(Site.ENCODER_SELF)
    module = nsa(norm="instance", affine=affine)
    with torch.no_grad():
        q_hat = module.merge_heads(module.project_query(call.query, call.context))  # (B, N, D)
    norm = module.query_norm
    gamma = norm.weight if affine else torch.ones(D)
    beta = norm.bias if affine else torch.zeros(D)
    for b in range(call.query.shape[0]):
        rows = q_hat[b, call.valid_queries[b]]  # (n_b, D)
        torch.testing.assert_close(rows.mean(0), beta, atol=1e-5, rtol=0)
        torch.testing.assert_close(rows.var(0, unbiased=False), gamma.square(), atol=0, rtol=1e-3)  # var/(var+eps)


@pytest.mark.parametrize("options", VARIANTS, ids=variant_id)
def test_padding_and_region_order_do_not_matter(options: dict) -> None:
    call = self_attention_call(Site.ENCODER_SELF)
    module = nsa(training=options["norm"] == "batch", **options)
    real = call.valid_queries
    noisy = call.query + 100.0 * torch.randn_like(call.query) * ~real[..., None]
    torch.testing.assert_close(call.run(module, query=noisy, key=noisy, value=noisy).out[real], call.run(module).out[real])
    order = torch.tensor([4, 0, 5, 2, 1, 3])
    x, mask = call.query[:, order], real[:, order]
    context = type(call.context)(Site.ENCODER_SELF, query_mask=mask)
    permuted = call.run(module, query=x, key=x, value=x, mask=mask[:, None, None, :], context=context).out
    torch.testing.assert_close(permuted[mask], call.run(module).out[:, order][mask])


def test_normalisation_changes_the_attention() -> None:
    """Same projection weights: NSA's weights differ from plain MHA's, and the key variant from the query one."""
    call = self_attention_call(Site.ENCODER_SELF)
    plain = build_mechanism("mha", Site.ENCODER_SELF)
    weights = {}
    for normalize in ("query", "key", "both"):
        module = nsa(normalize=normalize)
        module.load_state_dict(plain.state_dict(), strict=False)
        weights[normalize] = call.run(module, need_weights=True).weights
        assert not torch.allclose(weights[normalize], call.run(plain, need_weights=True).weights)
    assert not torch.allclose(weights["query"], weights["key"])


def test_parameters_and_dropped_biases() -> None:
    """NSA adds no parameters; the bias of a projection whose per-channel mean IN/BN subtracts is dropped (it
    would be cancelled exactly), LN keeps it; the affine transformation adds gamma and beta (2 d each)."""
    def count(name: str, **options) -> int:
        return sum(p.numel() for p in build_attention(name, d_model=512, num_heads=8, options=options).parameters())

    mha = count("mha")
    assert mha == 4 * (512 * 512 + 512)
    assert count("nsa") == mha - 512
    assert count("nsa", normalize="both") == mha - 2 * 512
    assert count("nsa", norm="batch") == mha - 512
    assert count("nsa", norm="layer", normalize="both") == mha
    assert count("nsa", affine=True) == mha - 512 + 2 * 512
    assert count("nsa", normalize="both", affine=True) == mha - 2 * 512 + 4 * 512


def test_only_encoder_self_attention() -> None:
    dims = AttentionDims(16, 4)
    check_placement("nsa", dims, site=Site.ENCODER_SELF, where="s")  # no geometry needed
    for site in (Site.DECODER_SELF, Site.CROSS):
        with pytest.raises(ConfigError, match=f"s: attention 'nsa' is not allowed at {site.value} sites"):
            check_placement("nsa", dims, site=site, where="s")
    for key in ("decoder_self_attention", "decoder_cross_attention"):
        data = {"model": {"d_model": 16, "num_heads": 2, key: {"name": "nsa"}}}
        with pytest.raises(ConfigError, match=rf"model\.{key}: attention 'nsa' is not allowed"):
            valid_config(data)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"norm": "group"}, r"model\.encoder_self_attention\.options\.norm: 'group' is not one of: instance, batch, layer"),
        ({"normalize": "value"}, r"options\.normalize: 'value' is not one of: query, key, both"),
        ({"eps": 0}, r"options\.eps: must be > 0\.0"),
        ({"gamma": True}, r"unknown config key model\.encoder_self_attention\.options\.gamma"),
    ],
)
def test_option_errors_name_the_key(options: dict, message: str) -> None:
    data = {"model": {"d_model": 16, "num_heads": 2, "encoder_self_attention": {"name": "nsa", "options": options}}}
    with pytest.raises(ConfigError, match=message):
        valid_config(data)
