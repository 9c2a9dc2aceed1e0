"""LW-Transformer's group-wise layers (issue 12) against the paper's equations written out group by group:
G-MHA (Eq. 6, Q/K expansion, WS, G-LML), G-FFN (Eq. 7-8, WS, G-IL), group independence, k = 1 equal to the
plain layers with copied weights, parameter counts from the formulas, Table II's exact backbone counts and
the MAdds of the paper's complexity formulas."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from registry_cases import call_for

from vlattn.attention import GroupMultiHeadAttention, KVCache, Site, build_attention
from vlattn.config import ModelConfig, Spec
from vlattn.errors import ConfigError
from vlattn.layers import GroupedLinear, build_feed_forward
from vlattn.models import build_captioner
from vlattn.models.profile import backbone_madds, backbone_parameters

D, H = 16, 4
OPTIONS = [
    dict(groups=k, expansion=n, share_weights=ws, group_merge=lml)
    for k, n, ws, lml in itertools.product([1, 2, 4], [1, 3], [True, False], [False, True])
]


def option_id(options: dict) -> str:
    return "k{groups}-n{expansion}-ws{share_weights:d}-lml{group_merge:d}".format(**options)


def gmha(seed: int = 0, d_model: int = D, num_heads: int = H, **options) -> GroupMultiHeadAttention:
    torch.manual_seed(seed)
    return build_attention("gmha", d_model=d_model, num_heads=num_heads, options=options).eval()


def group_weights(linear, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The (out/k, in/k) weight and bias that group ``group`` of a GroupedLinear uses."""
    if linear.shared:
        return linear.weight, linear.bias
    return linear.weight[group], linear.bias[group]


def grouped_reference(linear, x: torch.Tensor) -> torch.Tensor:
    """Eq. 5 with a linear tau, group by group: [X_1 W_1 + b_1, ..., X_k W_k + b_k]."""
    k = linear.groups
    parts = x.chunk(k, dim=-1)
    return torch.cat([F.linear(part, *group_weights(linear, g)) for g, part in enumerate(parts)], dim=-1)


def reference_gmha(module: GroupMultiHeadAttention, q, k, v, mask=None) -> torch.Tensor:
    """Eq. 6 written out: for every group g, multi-head attention over channels X_g with h/k heads (query/key
    head width n d / h), the groups concatenated, then the merge (dense, or group by group with G-LML)."""
    groups, heads = module.groups, module.num_heads // module.groups
    outputs = []
    for g, (qg, kg, vg) in enumerate(zip(q.chunk(groups, -1), k.chunk(groups, -1), v.chunk(groups, -1))):
        projected = [F.linear(x, *group_weights(lin, g)).unflatten(-1, (heads, -1)).transpose(1, 2)
                     for x, lin in ((qg, module.q_proj), (kg, module.k_proj), (vg, module.v_proj))]
        qh, kh, vh = projected  # (B, h/k, N, width)
        logits = qh @ kh.transpose(-2, -1) / math.sqrt(qh.shape[-1])
        if mask is not None:
            logits = logits.masked_fill(~mask, float("-inf"))
        outputs.append((logits.softmax(-1) @ vh).transpose(1, 2).flatten(2))  # (B, Nq, d/k)
    merged_input = torch.cat(outputs, dim=-1)
    merge = module.out_proj
    return grouped_reference(merge, merged_input) if isinstance(merge, GroupedLinear) else merge(merged_input)


# --- the group-wise linear layer ------------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("groups", [1, 2, 4])
def test_grouped_linear_is_block_diagonal(groups: int, shared: bool) -> None:
    torch.manual_seed(0)
    layer = GroupedLinear(8, 12, groups, shared=shared)
    x = torch.randn(3, 5, 8)
    torch.testing.assert_close(layer(x), grouped_reference(layer, x))
    per_group = (8 // groups) * (12 // groups) + 12 // groups
    assert sum(p.numel() for p in layer.parameters()) == per_group * (1 if shared or groups == 1 else groups)
    if groups == 1:  # an nn.Linear with the same parameter shapes
        assert layer.weight.shape == (12, 8) and layer.bias.shape == (12,)
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))


def test_grouped_linear_refuses_indivisible_sizes() -> None:
    with pytest.raises(ValueError, match="not divisible by 3 groups"):
        GroupedLinear(8, 12, 3, shared=True)


# --- G-MHA ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("options", OPTIONS, ids=option_id)
@pytest.mark.parametrize("site", list(Site), ids=lambda s: s.value)
def test_gmha_matches_eq6_written_out(options: dict, site: Site) -> None:
    """Every option combination at every site: shapes of out and weights, fused == explicit == reference."""
    module, call = gmha(**options), call_for("gmha", site)
    fused = call.run(module).out
    explicit = call.run(module, need_weights=True)
    batch, queries = call.query.shape[:2]
    assert fused.shape == (batch, queries, D)
    assert explicit.weights.shape == (batch, H, queries, call.key.shape[1])
    torch.testing.assert_close(explicit.out, fused)
    with torch.no_grad():
        torch.testing.assert_close(fused, reference_gmha(module, call.query, call.key, call.value, call.mask))
    n = options["expansion"]
    assert module.q_proj(call.query).shape[-1] == module.k_proj(call.key).shape[-1] == n * D


@pytest.mark.parametrize("site", list(Site), ids=lambda s: s.value)
def test_one_group_is_plain_mha_with_copied_weights(site: Site) -> None:
    mha = build_attention("mha", d_model=D, num_heads=H).eval()
    grouped = gmha(seed=3, groups=1)
    assert not torch.allclose(grouped.q_proj.weight, mha.q_proj.weight)
    grouped.load_state_dict(mha.state_dict())  # same names and shapes
    call = call_for("mha", site)
    torch.testing.assert_close(call.run(grouped).out, call.run(mha).out, rtol=0, atol=0)
    torch.testing.assert_close(call.run(grouped, need_weights=True).weights, call.run(mha, need_weights=True).weights,
                               rtol=0, atol=0)


@pytest.mark.parametrize("group_merge", [False, True])
@pytest.mark.parametrize("share_weights", [True, False])
def test_perturbing_one_group_leaves_the_others_alone(share_weights: bool, group_merge: bool) -> None:
    """Changing group 1's input channels changes group 1's pre-merge output only; the dense merge then mixes
    groups (the paper's cross-group exchange), a group-wise merge (G-LML) does not."""
    module = gmha(groups=2, expansion=2, share_weights=share_weights, group_merge=group_merge)
    captured = []
    module.out_proj.register_forward_hook(lambda mod, args, out: captured.append(args[0]))
    x = torch.randn(2, 6, D)
    other = x.clone()
    other[..., D // 2:] += torch.randn(2, 6, D // 2)
    before, after = module(x, x, x).out, module(other, other, other).out
    pre_before, pre_after = captured
    torch.testing.assert_close(pre_after[..., : D // 2], pre_before[..., : D // 2])
    assert not torch.allclose(pre_after[..., D // 2:], pre_before[..., D // 2:])
    assert torch.allclose(after[..., : D // 2], before[..., : D // 2]) == group_merge
    assert not torch.allclose(after[..., D // 2:], before[..., D // 2:])


def attention_params(d: int, k: int, n: int, shared: bool, group_merge: bool) -> int:
    """The paper's count: per group Q/K d/k -> n d/k, V d/k -> d/k (with biases), k copies unless shared; merge
    d x d (+ d), or d/k x d/k per group with G-LML."""
    copies = 1 if shared or k == 1 else k
    qkv = copies * (2 * (d // k * n * d // k + n * d // k) + (d // k) ** 2 + d // k)
    merge = copies * ((d // k) ** 2 + d // k) if group_merge else d * d + d
    return qkv + merge


@pytest.mark.parametrize("options", OPTIONS, ids=option_id)
def test_gmha_parameter_counts(options: dict) -> None:
    module = gmha(d_model=64, num_heads=8, **options)
    counted = sum(p.numel() for p in module.parameters())
    assert counted == attention_params(64, options["groups"], options["expansion"], options["share_weights"],
                                       options["group_merge"])


@pytest.mark.parametrize("groups", [2, 4])
def test_shared_weights_keep_one_over_k_squared(groups: int) -> None:
    """Sec. III-B: group-wise projections keep 1/k of the dense Q/K/V weights, with WS 1/k^2."""
    def qkv_weights(module) -> int:
        return sum(lin.weight.numel() for lin in (module.q_proj, module.k_proj, module.v_proj))

    dense = qkv_weights(build_attention("mha", d_model=64, num_heads=8))
    assert qkv_weights(gmha(d_model=64, num_heads=8, groups=groups, share_weights=False)) * groups == dense
    assert qkv_weights(gmha(d_model=64, num_heads=8, groups=groups, share_weights=True)) * groups**2 == dense


def test_gmha_appending_cache_with_expansion_and_separate_groups() -> None:
    module = gmha(groups=2, expansion=3, share_weights=False, group_merge=True)
    call = call_for("gmha", Site.DECODER_SELF)
    x, cache = call.query, KVCache()
    steps = [module(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], cache=cache).out for t in range(x.shape[1])]
    assert cache.key.shape[-1] == 3 * D // H and cache.value.shape[-1] == D // H
    torch.testing.assert_close(torch.cat(steps, dim=1), call.run(module).out)


@pytest.mark.parametrize(
    ("heads", "options", "message"),
    [(4, {"groups": 3}, "num_heads 4 is not divisible by groups 3"), (4, {"groups": 0}, "groups: must be >= 1"),
     (4, {"expansion": 0}, "expansion: must be >= 1"), (4, {"groups": 8}, "num_heads 4 is not divisible by groups 8")],
)
def test_bad_groups_are_config_errors_naming_the_site(heads: int, options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"model\.site.*{message}"):
        build_attention("gmha", d_model=D, num_heads=heads, options=options, where="model.site")


# --- G-FFN ------------------------------------------------------------------------------------------------------

FFN_OPTIONS = [dict(groups=k, share_weights=ws, group_intermediate=il)
               for k, ws, il in itertools.product([1, 2, 4], [True, False], [False, True])]


def gffn(seed: int = 0, **options):
    torch.manual_seed(seed)
    return build_feed_forward("gffn", D, 4 * D, options=options).eval()


@pytest.mark.parametrize("options", FFN_OPTIONS, ids=lambda o: "k{groups}-ws{share_weights:d}-il{group_intermediate:d}".format(**o))
def test_gffn_matches_eq7_8_and_counts(options: dict) -> None:
    """H = max(0, X W1 + b1) (group-wise with G-IL); G-FFN(X) = [H_1 W2 + b2, ..., H_k W2 + b2]."""
    module = gffn(**options)
    x = torch.randn(2, 5, D)
    first = module.fc1
    hidden = (grouped_reference(first, x) if isinstance(first, GroupedLinear) else first(x)).relu()
    torch.testing.assert_close(module(x), grouped_reference(module.fc2, hidden))
    k, d, d_ff = options["groups"], D, 4 * D
    copies = 1 if options["share_weights"] or k == 1 else k
    expand = copies * (d // k * d_ff // k + d_ff // k) if options["group_intermediate"] else d * d_ff + d_ff
    assert sum(p.numel() for p in module.parameters()) == expand + copies * (d_ff // k * d // k + d // k)


def test_one_group_is_the_plain_ffn_with_copied_weights() -> None:
    plain = build_feed_forward("plain", D, 4 * D).eval()
    grouped = gffn(seed=5, groups=1)
    grouped.load_state_dict(plain.state_dict())
    x = torch.randn(2, 5, D)
    torch.testing.assert_close(grouped(x), plain(x), rtol=0, atol=0)


@pytest.mark.parametrize("group_intermediate", [False, True])
def test_gffn_group_independence(group_intermediate: bool) -> None:
    """Hidden group g reaches output group g only; with G-IL input group g reaches output group g only."""
    module = gffn(groups=2, share_weights=False, group_intermediate=group_intermediate)
    x = torch.randn(2, 5, D)
    other = x.clone()
    other[..., D // 2:] += torch.randn(2, 5, D // 2)
    assert torch.allclose(module(other)[..., : D // 2], module(x)[..., : D // 2]) == group_intermediate
    hidden = torch.randn(2, 5, 4 * D)
    changed = hidden.clone()
    changed[..., 2 * D:] += 1.0
    torch.testing.assert_close(module.fc2(changed)[..., : D // 2], module.fc2(hidden)[..., : D // 2])


def test_gffn_bad_groups_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"model\.feed_forward: feed-forward 'gffn' d_model 16 is not divisible by groups 3"):
        build_feed_forward("gffn", D, 4 * D, options={"groups": 3}, where="model.feed_forward")
    with pytest.raises(ConfigError, match=r"model\.feed_forward\.options\.group_intermediate"):
        build_feed_forward("gffn", D, 4 * D, options={"group_intermediate": "yes"}, where="model.feed_forward")


# --- the paper's backbone: Table II counts and the complexity formulas ----------------------------------------


def lw_config(groups: int = 2, expansion: int = 1, share: bool = True, **fields) -> ModelConfig:
    attention = Spec("gmha", {"groups": groups, "expansion": expansion, "share_weights": share})
    return ModelConfig(encoder_self_attention=attention, decoder_self_attention=attention,
                       decoder_cross_attention=attention, feed_forward=Spec("gffn", {"groups": groups, "share_weights": share}),
                       **fields)


def test_table2_backbone_counts_are_exact() -> None:
    """6+6 layers, d=512, FFN 2048, 8 heads: Transformer 44,138,496 (Table II "44.1M"); LW-Transformer 1x,
    G-MHA + G-FFN + WS, k=2: 24,067,584 (Table II "24.0M", the authors' VQA code)."""
    six = dict(encoder_layers=6, decoder_layers=6)
    with torch.device("meta"):
        plain = build_captioner(ModelConfig(**six), 10201)
        light = build_captioner(lw_config(**six), 10201)
    assert backbone_parameters(plain) == 44_138_496
    assert backbone_parameters(light) == 24_067_584
    # by the formulas: 6 x (MHA + FFN + 2 LN) + 6 x (2 MHA + FFN + 3 LN)
    mha, ffn = 4 * (512 * 512 + 512), 2 * 512 * 2048 + 2048 + 512
    gmha_ws, gffn_ws = 3 * (256 * 256 + 256) + 512 * 512 + 512, 512 * 2048 + 2048 + 1024 * 256 + 256
    assert 6 * (3 * mha + 2 * ffn + 5 * 1024) == 44_138_496
    assert 6 * (3 * gmha_ws + 2 * gffn_ws + 5 * 1024) == 24_067_584


@pytest.mark.parametrize(("groups", "expansion"), [(1, 1), (2, 1), (2, 3)])
def test_backbone_madds_follow_the_complexity_formulas(groups: int, expansion: int) -> None:
    """Encoder over N regions, decoder over T tokens attending to them; per token and layer: Q/K projections
    2 n d^2 / k, V d^2 / k, merge d^2, FFN d d_f (1 + 1/k); attention products N_q N_k d (n + 1)."""
    d, d_ff, N, T = 16, 32, 5, 7
    model = build_captioner(lw_config(groups, expansion, feature_dim=12, d_model=d, num_heads=4, d_ff=d_ff,
                                      encoder_layers=2, decoder_layers=3), 20).eval()
    project = lambda length, n=expansion: length * d * d * n // groups  # noqa: E731 (one Q or K: n d^2 / k)
    ffn = lambda length: length * (d * d_ff + d_ff * d // groups)  # noqa: E731
    products = lambda nq, nk: nq * nk * d * (expansion + 1)  # noqa: E731
    encoder = 2 * project(N) + project(N, 1) + N * d * d + ffn(N) + products(N, N)
    decoder_self = 2 * project(T) + project(T, 1) + T * d * d + products(T, T)
    cross = project(T) + project(N) + project(N, 1) + T * d * d + products(T, N)
    expected = 2 * encoder + 3 * (decoder_self + cross + ffn(T))
    assert backbone_madds(model, N, T, 12, 20) == expected


def test_lw_preset_is_table2_lw_1x_with_the_scaled_rate() -> None:
    from vlattn.validation import load_valid_config
    from vlattn.models import check_model_config
    from vlattn.training.schedules import build_schedule, lr_scale

    cfg = load_valid_config("lw-transformer")
    model = check_model_config(cfg.model, 10201)
    assert backbone_parameters(model) == 24_067_584
    for site in ("encoder_self_attention", "decoder_self_attention", "decoder_cross_attention"):
        assert getattr(cfg.model, site).options == {"groups": 2, "expansion": 1, "share_weights": True, "group_merge": False}
    schedule = build_schedule(cfg.train.schedule, cfg.model.d_model)
    rate = lr_scale(cfg.train.lr_scaling, model) * schedule.lr_at(0, epoch=3)  # the first epoch after warm-up
    assert rate == pytest.approx(1e-4 * math.sqrt(2))
