"""Stacked Latent Attention (Sec. 3.3) and the plain stacked attention it is compared with (Sec. 3.2): unit shapes
for T = 1..3, the equations against references written out by hand, the softmax-free main pathway (gradients
reach z^(0) when every softmax is saturated; they do not reach the first plain unit), the positional bias."""

from __future__ import annotations

import pytest
import torch
from registry_cases import D, Q_DIM, cross_call, cross_context

from vlattn.attention import AttentionDims, Site, StackedLatentAttention, build_attention, check_placement
from vlattn.attention.mha import attention_logits_mask
from vlattn.errors import ConfigError
from vlattn.layers.boxes import box_channels

M, P = 8, 2  # hidden size m and positional-bias channels of these tests


def build(name: str, seed: int = 0, **options) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_attention(name, d_model=M, query_dim=Q_DIM, key_dim=D, options=options).eval()


def run_trace(module, call, **changes):
    args = {"mask": call.mask, **changes}
    if isinstance(module, StackedLatentAttention):
        args.setdefault("context", call.context)
    return module.trace(call.query, call.key, call.value, **args)


@pytest.mark.parametrize("units", [1, 2, 3])
def test_unit_shapes(units: int) -> None:
    module, call = build("sla", units=units, bias_channels=P), cross_call(Q_DIM, geometry=True)
    assert len(module.units) == units
    first = module.units[0]
    assert first.key_latent_proj.weight.shape == (M, D) and first.position_proj.weight.shape == (M, P)  # z^(0) = [v, b]
    assert first.summary_proj is None
    for unit in module.units[1:]:  # z^(t-1) = [s^(t-1), a^(t-1)]: m + D channels
        assert unit.position_proj.weight.shape == (M, M) and unit.summary_proj.weight.shape == (M, D)
        assert unit.key_latent_proj is None
    trace = run_trace(module, call)
    assert len(trace.latents) == len(trace.weights) == units
    for latent, weights in zip(trace.latents, trace.weights, strict=True):
        assert latent.shape == (3, 4, 6, M) and weights.shape == (3, 1, 4, 6)
        torch.testing.assert_close(weights.sum(-1), torch.ones(3, 1, 4))
        assert (weights[2, :, :, 4:] == 0).all()  # the padded keys of row 2
    assert trace.out.shape == (3, 4, D) and module.out_dim == D


def concat_weight(*linears) -> torch.Tensor:
    """The weight of one linear map over concatenated inputs, from the maps of its parts."""
    return torch.cat([linear.weight for linear in linears], dim=1)


@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_sla_follows_the_equations(pooling: str) -> None:
    """z^(0) = [v, b_pos]; s^(t) = relu(W_v v + W_h h + W_z z^(t-1)); z^(t) = [s^(t), sum alpha v];
    out = pool(W_o z^(T) + b_o) — for each image and query, over its real regions only."""
    module, call = build("sla", units=2, bias_channels=P, pooling=pooling), cross_call(Q_DIM, geometry=True)
    first, second = module.units
    readout = module.readout
    with torch.no_grad():
        out = run_trace(module, call).out
        for b in range(3):
            real = call.valid_keys[b]
            v, boxes = call.key[b, real], call.boxes[b, real]
            for q in range(4):
                h = call.query[b, q]
                bias = box_channels(boxes) @ module.positional.proj(h).view(P, 5).T  # (n, P): U(h) e_i
                z = torch.cat([v, bias], dim=1)
                for unit, w_z in ((first, concat_weight(first.key_latent_proj, first.position_proj)),
                                  (second, concat_weight(second.position_proj, second.summary_proj))):
                    s = torch.relu(unit.key_proj(v) + unit.query_proj(h) + z @ w_z.T)  # (n, m)
                    alpha = torch.softmax(unit.score(s).squeeze(-1), 0)
                    z = torch.cat([s, (alpha @ v).expand(len(v), -1)], dim=1)  # (n, m + D)
                conv = z @ concat_weight(readout.latent_proj, readout.summary_proj).T + readout.summary_proj.bias
                expected = conv.mean(0) if pooling == "mean" else conv.amax(0)
                torch.testing.assert_close(out[b, q], expected)


def test_stacked_attention_follows_the_equations() -> None:
    """h^(1) = query; alpha^(t) = softmax(W_u relu(W_v v + W_h h^(t))); h^(t+1) = z^(t) = sum alpha v; out = z^(T)."""
    module, call = build("stacked", units=2), cross_call(Q_DIM)
    with torch.no_grad():
        out = run_trace(module, call).out
        for b in range(3):
            v = call.key[b, call.valid_keys[b]]
            for q in range(4):
                h = call.query[b, q]
                for unit in module.units:
                    alpha = torch.softmax(unit.score(torch.relu(unit.key_proj(v) + unit.query_proj(h))).squeeze(-1), 0)
                    h = alpha @ v
                torch.testing.assert_close(out[b, q], h)


def saturate(module) -> None:
    """Scale every unit's W_u so that each softmax is one-hot in float32."""
    with torch.no_grad():
        for unit in module.units:
            unit.score.weight.mul_(1e5)


def test_main_pathway_is_softmax_free() -> None:
    """With every softmax saturated, the gradient of the output w.r.t. z^(0)'s positional channels and w.r.t. the
    first unit's latent map is clearly nonzero for SLA; for plain stacked attention, whose first latent map reaches
    the output only through its softmax, it vanishes."""
    call = cross_call(Q_DIM, geometry=True)
    sla, stacked = build("sla", units=3, bias_channels=P), build("stacked", units=3)
    saturate(sla)
    saturate(stacked)
    keys, values = sla.project_key_value(call.key, call.value)
    bias = sla.positional(call.query, call.key, call.context).detach().requires_grad_()  # z^(0)'s b_pos channels
    trace = sla.run_units(keys, values, call.query, bias, attention_logits_mask(call.mask, None))
    assert all(w.amax(-1).min() > 1 - 1e-6 for w in trace.weights)  # saturated: one key per query
    trace.latents[0].retain_grad()
    trace.out.sum().backward()
    plain = run_trace(stacked, call)
    assert all(w.amax(-1).min() > 1 - 1e-6 for w in plain.weights)
    plain.latents[0].retain_grad()
    plain.out.sum().backward()
    assert bias.grad.abs().mean() > 1e-3
    sla_first, plain_first = trace.latents[0].grad.abs().mean(), plain.latents[0].grad.abs().mean()
    assert sla_first > 1e-3 and plain_first < 1e-9 * sla_first


def test_positional_bias_changes_first_unit_attention() -> None:
    module, call = build("sla", units=2, bias_channels=P), cross_call(Q_DIM, geometry=True)
    keys, values = module.project_key_value(call.key, call.value)
    logits_mask = attention_logits_mask(call.mask, None)
    bias = module.positional(call.query, call.key, call.context)  # (B, Nq, K, P)
    with torch.no_grad():
        biased = module.run_units(keys, values, call.query, bias, logits_mask).weights[0]
        unbiased = module.run_units(keys, values, call.query, torch.zeros_like(bias), logits_mask).weights[0]
        assert (biased - unbiased).abs().amax() > 1e-2
        # only the boxes move: the first unit's attention follows them through b_pos
        moved = cross_context(call.boxes.flip(-1), call.valid_keys)
        assert (run_trace(module, call, context=moved).weights[0] - biased).abs().amax() > 1e-2
        no_bias = build("sla", units=2, position="none")
        assert no_bias.positional is None and no_bias.units[0].position_proj is None
        torch.testing.assert_close(run_trace(no_bias, call, context=moved).out, run_trace(no_bias, call).out)


def test_grid_bias_is_one_value_per_cell() -> None:
    """position 'grid': b_pos = FC(h) reshaped to (K cells, P), key i being cell i (Sec. 3.4, Fig. 8)."""
    module, call = build("sla", units=1, position="grid", grid_cells=6, bias_channels=P), cross_call(Q_DIM)
    bias = module.positional(call.query, call.key, call.context)  # (B, Nq, 6, P)
    expected = module.positional.proj(call.query).view(3, 4, P, 6).transpose(-1, -2)
    torch.testing.assert_close(bias, expected)
    with pytest.raises(ConfigError, match=r"expects 6 keys \(options.grid_cells\), got 5"):
        module(call.query, call.key[:, :5], call.value[:, :5])


def test_boxes_bias_needs_geometry() -> None:
    module, call = build("sla"), cross_call(Q_DIM)
    with pytest.raises(ValueError, match="needs the keys' boxes in context.geometry"):
        module(call.query, call.key, call.value)


@pytest.mark.parametrize("position", ["grid", "none"])
def test_only_the_boxes_bias_needs_geometry_at_placement(position: str) -> None:
    """Capabilities follow the options: without ``position: boxes`` SLA reads no geometry, so a cross site that
    passes no boxes accepts it (as it accepts ``stacked``); with boxes it is refused there, naming the key."""
    dims = AttentionDims(D, 1, 0.0, Q_DIM, D)
    check_placement("sla", dims, site=Site.CROSS, where="model.x", has_geometry=False, options={"position": position})
    with pytest.raises(ConfigError, match="model.x: attention 'sla' needs box geometry"):
        check_placement("sla", dims, site=Site.CROSS, where="model.x", has_geometry=False, options={"position": "boxes"})
    with pytest.raises(ConfigError, match="model.x: attention 'sla' needs box geometry"):
        check_placement("sla", dims, site=Site.CROSS, where="model.x", has_geometry=False)  # default: boxes
    with pytest.raises(ConfigError, match="model.x.options"):
        check_placement("sla", dims, site=Site.CROSS, where="model.x", options={"position": "nowhere"})
