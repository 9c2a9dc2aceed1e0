"""GSA and NG-SAN attention (NG-SAN Sec. 4.2-4.3, Eq. 8-13): relative geometry by hand, finite for zero-size
and identical boxes; a naive loop-based reference of every phi variant and of NSA + GSA; each variant
changes the logits; equivariance and padding; parameters; placement."""

from __future__ import annotations

import math
from itertools import combinations

import pytest
import torch
from registry_cases import D, H, build_mechanism, naive_attention_loops, random_boxes, self_attention_call

from vlattn.attention import AttentionContext, AttentionDims, Site, build_attention, check_placement
from vlattn.validation import valid_config
from vlattn.errors import ConfigError
from vlattn.layers import BoxGeometry
from vlattn.layers.geometry import RATIO_EPS, SIZE_EPS

PHIS = ("content_independent", "query_dependent", "key_dependent")
PHI_SETS = [[phi] for phi in PHIS] + [list(pair) for pair in combinations(PHIS, 2)] + [list(PHIS)]


# --- Eq. 8 ------------------------------------------------------------------------------------------------------


def test_relative_geometry_by_hand() -> None:
    # box i: centre (0.1, 0.2), w 0.2, h 0.4; box j: centre (0.55, 0.55), w 0.1, h 0.1
    boxes = torch.tensor([[[0.0, 0.0, 0.2, 0.4], [0.5, 0.5, 0.6, 0.6]]])
    f = BoxGeometry(boxes).relative
    expected_ij = [math.log(0.45 / 0.2), math.log(0.35 / 0.4), math.log(2.0), math.log(4.0)]
    expected_ji = [math.log(0.45 / 0.1), math.log(0.35 / 0.1), math.log(0.5), math.log(0.25)]
    torch.testing.assert_close(f[0, 0, 1], torch.tensor(expected_ij))
    torch.testing.assert_close(f[0, 1, 0], torch.tensor(expected_ji))
    diagonal = torch.tensor([math.log(RATIO_EPS), math.log(RATIO_EPS), 0.0, 0.0])
    torch.testing.assert_close(f[0, 0, 0], diagonal)
    torch.testing.assert_close(f[0, 1, 1], diagonal)


def test_geometry_finite_for_zero_size_and_identical_boxes() -> None:
    boxes = torch.tensor([[
        [0.2, 0.2, 0.4, 0.5],  # 0
        [0.2, 0.2, 0.4, 0.5],  # 1: identical to 0
        [0.7, 0.7, 0.7, 0.7],  # 2: zero size (a point)
        [0.0, 0.0, 0.0, 0.0],  # 3: zero padding
        [0.3, 0.1, 0.3, 0.6],  # 4: zero width, same centre x as 0
    ]])
    f = BoxGeometry(boxes).relative
    assert torch.isfinite(f).all() and torch.isfinite(BoxGeometry(boxes).relative_signed).all()
    bound = math.log(1 / SIZE_EPS)
    assert f.abs().max() <= bound + 1e-4
    torch.testing.assert_close(f[0, 0, 1], torch.tensor([math.log(RATIO_EPS), math.log(RATIO_EPS), 0.0, 0.0]))
    # a point has size SIZE_EPS: log(0.5 / 1e-3) = log 500 from 0 to 2 in x
    torch.testing.assert_close(f[0, 0, 2, 2], torch.tensor(math.log(0.2 / SIZE_EPS)))
    torch.testing.assert_close(f[0, 4, 0, 0], torch.tensor(math.log(RATIO_EPS)))  # common centre x
    # and the attention output and its gradients stay finite with such boxes
    module = build_mechanism("ngsa", Site.ENCODER_SELF, phi=list(PHIS)).train()
    x = torch.randn(1, 5, D, requires_grad=True)
    context = AttentionContext(Site.ENCODER_SELF, geometry=BoxGeometry(boxes))
    out = module(x, x, x, context=context).out
    out.square().sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters())


def test_signed_geometry_by_hand() -> None:
    boxes = torch.tensor([[[0.0, 0.0, 0.2, 0.4], [0.5, 0.5, 0.6, 0.6]]])
    f = BoxGeometry(boxes).relative_signed
    torch.testing.assert_close(f[0, 0, 1], torch.tensor([-math.log(1 + 2.25), -math.log(1 + 0.875), math.log(2.0), math.log(4.0)]))
    torch.testing.assert_close(f[0, 1, 0], torch.tensor([math.log(1 + 4.5), math.log(1 + 3.5), math.log(0.5), math.log(0.25)]))
    torch.testing.assert_close(f[0, 0, 0], torch.zeros(4))


def test_paper_geometry_cannot_tell_left_from_right_signed_can() -> None:
    """Eq. 8 uses |x_i - x_j|: a mirrored layout (x -> 1 - x) gives the same bias and the same outputs."""
    call = self_attention_call(Site.ENCODER_SELF)
    mirrored_boxes = torch.stack([1 - call.boxes[..., 2], call.boxes[..., 1], 1 - call.boxes[..., 0], call.boxes[..., 3]], -1)
    mirrored = AttentionContext(Site.ENCODER_SELF, call.valid_queries, BoxGeometry(mirrored_boxes, call.valid_queries))
    real = call.valid_queries
    for geometry, same in (("paper", True), ("signed", False)):
        module = build_mechanism("gsa", Site.ENCODER_SELF, phi=list(PHIS), geometry=geometry)
        out, flipped = call.run(module).out[real], call.run(module, context=mirrored).out[real]
        assert torch.allclose(out, flipped, atol=1e-5) is same, geometry


def test_relative_geometry_ignores_the_scale_of_the_coordinates() -> None:
    boxes = random_boxes(2, 5, torch.Generator().manual_seed(3))
    torch.testing.assert_close(BoxGeometry(boxes * 640).relative, BoxGeometry(boxes).relative, atol=1e-4, rtol=1e-5)


# --- Eq. 9-13 against loops ---------------------------------------------------------------------------------------


def naive_geometry(boxes: torch.Tensor, b: int, i: int, j: int, signed: bool = False) -> list[float]:
    """Eq. 8 for one pair, with the clamps of vlattn.layers.geometry (``signed``: the direction-keeping variant)."""
    def centre_size(box):
        x1, y1, x2, y2 = box.tolist()
        return (x1 + x2) / 2, (y1 + y2) / 2, max(x2 - x1, SIZE_EPS), max(y2 - y1, SIZE_EPS)

    xi, yi, wi, hi = centre_size(boxes[b, i])
    xj, yj, wj, hj = centre_size(boxes[b, j])
    sizes = [math.log(wi / wj), math.log(hi / hj)]
    if signed:
        return [math.copysign(math.log1p(abs(t)), t) for t in ((xi - xj) / wi, (yi - yj) / hi)] + sizes
    return [math.log(max(abs(xi - xj) / wi, RATIO_EPS)), math.log(max(abs(yi - yj) / hi, RATIO_EPS)), *sizes]


def naive_phi(module, x: torch.Tensor, boxes: torch.Tensor, b: int, h: int, i: int, j: int) -> float:
    """phi_ij of head h as the sum of the variants present (Eq. 9, 11-13), scalar by scalar."""
    bias = module.geometric_bias
    f = naive_geometry(boxes, b, i, j, signed=module.relative_geometry == "relative_signed")
    fc_w, fc_b = bias.geometry_fc.weight.tolist(), bias.geometry_fc.bias.tolist()
    g = [max(0.0, sum(fc_w[k][m] * f[m] for m in range(4)) + fc_b[k]) for k in range(bias.d_g)]  # Eq. 9
    cols = range(h * bias.d_g, (h + 1) * bias.d_g)
    total = 0.0
    if bias.content_weight is not None:  # Eq. 11
        w = bias.content_weight.weight[h].tolist()
        total += max(0.0, sum(w[k] * g[k] for k in range(bias.d_g)))
    for proj, row in ((bias.query_proj, i), (bias.key_proj, j)):  # Eq. 12 (Q'_i), Eq. 13 (K'_j)
        if proj is not None:
            projected = (x[b, row] @ proj.weight.T + proj.bias).tolist()
            total += sum(projected[c] * g[k] for k, c in enumerate(cols))
    return total


def naive_gsa(module, x: torch.Tensor, boxes: torch.Tensor, real: torch.Tensor, normalised_q=None) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k) + phi) V head by head (Eq. 10), padded keys excluded."""
    q = x @ module.q_proj.weight.T + (0.0 if module.q_proj.bias is None else module.q_proj.bias)
    q = q if normalised_q is None else normalised_q
    k = x @ module.k_proj.weight.T + module.k_proj.bias
    v = x @ module.v_proj.weight.T + module.v_proj.bias
    return naive_attention_loops(q, k, v, real, module.out_proj, lambda b, h, i, j: naive_phi(module, x, boxes, b, h, i, j))


@pytest.mark.parametrize(
    ("phi", "geometry"), [(p, "paper") for p in PHI_SETS] + [(list(PHIS), "signed")],
    ids=["+".join(p) for p in PHI_SETS] + ["signed"],
)
def test_gsa_matches_naive_reference(phi: list[str], geometry: str) -> None:
    call = self_attention_call(Site.ENCODER_SELF, length=5)
    module = build_mechanism("gsa", Site.ENCODER_SELF, phi=phi, geometry=geometry)
    real = call.valid_queries
    with torch.no_grad():
        expected = naive_gsa(module, call.query, call.boxes, real)
        out, weights = call.run(module, need_weights=True)
    torch.testing.assert_close(out[real], expected[real], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(call.run(module).out[real], expected[real], atol=1e-5, rtol=1e-4)


def test_ngsa_is_gsa_over_normalised_queries() -> None:
    """NG-SAN (Sec. 4.3): IN(Q) K^T + phi(Q', K', G), Q' from the unnormalised input."""
    call = self_attention_call(Site.ENCODER_SELF, length=5)
    module = build_mechanism("ngsa", Site.ENCODER_SELF, phi=["query_dependent", "key_dependent"])
    real = call.valid_queries
    with torch.no_grad():
        q = call.query @ module.q_proj.weight.T  # (B, N, D), no bias (IN cancels it)
        mask = real[..., None]
        mean = (q * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True)
        var = ((q - mean).square() * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True)
        expected = naive_gsa(module, call.query, call.boxes, real, normalised_q=(q - mean) / torch.sqrt(var + 1e-5))
        torch.testing.assert_close(call.run(module).out[real], expected[real], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("phi", PHIS)
def test_each_phi_variant_changes_the_logits(phi: str) -> None:
    """With the content projections of plain MHA, each variant's attention weights differ from MHA's and
    depend on the boxes; phi1 (ReLU) only raises logits."""
    call = self_attention_call(Site.ENCODER_SELF)
    plain = build_mechanism("mha", Site.ENCODER_SELF)
    module = build_mechanism("gsa", Site.ENCODER_SELF, phi=[phi])
    module.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        weights = call.run(module, need_weights=True).weights
        assert not torch.allclose(weights, call.run(plain, need_weights=True).weights, atol=1e-4)
        moved = AttentionContext(Site.ENCODER_SELF, call.valid_queries, BoxGeometry(call.boxes.flip(1), call.valid_queries))
        assert not torch.allclose(weights, call.run(module, need_weights=True, context=moved).weights, atol=1e-4)
        bias = module.logit_bias(call.query, call.key, call.context)  # (B, H, N, N)
    assert bias.shape == (3, H, 6, 6) and bias.abs().sum() > 0
    if phi == "content_independent":
        assert (bias >= 0).all()
        assert torch.equal(bias, module.logit_bias(torch.randn_like(call.query), call.key, call.context))
    if phi == "query_dependent":  # a query's bias row depends on that query only
        other = call.query.clone()
        other[:, 0] += 1.0
        changed = module.logit_bias(other, call.key, call.context)
        torch.testing.assert_close(changed[:, :, 1:], bias[:, :, 1:])
        assert not torch.allclose(changed[:, :, 0], bias[:, :, 0])


@pytest.mark.parametrize("name", ["gsa", "ngsa"])
@pytest.mark.parametrize("phi", PHIS)
def test_padding_and_region_order_do_not_matter(name: str, phi: str) -> None:
    call = self_attention_call(Site.ENCODER_SELF)
    module = build_mechanism(name, Site.ENCODER_SELF, phi=[phi])
    real = call.valid_queries
    noisy = call.query + 100.0 * torch.randn_like(call.query) * ~real[..., None]
    odd_boxes = torch.where(real[..., None], call.boxes, torch.zeros_like(call.boxes))
    padded = AttentionContext(Site.ENCODER_SELF, real, BoxGeometry(odd_boxes, real))
    out = call.run(module).out
    torch.testing.assert_close(call.run(module, query=noisy, key=noisy, value=noisy, context=padded).out[real], out[real])
    order = torch.tensor([4, 0, 5, 2, 1, 3])
    x, mask = call.query[:, order], real[:, order]
    context = AttentionContext(Site.ENCODER_SELF, mask, BoxGeometry(call.boxes[:, order], mask))
    permuted = call.run(module, query=x, key=x, value=x, mask=mask[:, None, None, :], context=context).out
    torch.testing.assert_close(permuted[mask], out[:, order][mask])


def test_geometry_is_computed_once_per_image_for_all_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    from vlattn.models import EncoderLayer, TransformerEncoder
    from vlattn.layers import PostNorm, build_feed_forward
    from vlattn.models.encoder import region_projection

    calls = []
    original = BoxGeometry.centre_size
    monkeypatch.setattr(BoxGeometry, "centre_size", lambda self: calls.append(1) or original(self))
    layers = [
        EncoderLayer(build_attention("gsa", d_model=D, num_heads=H), build_feed_forward("plain", D, 32), PostNorm(D), PostNorm(D))
        for _ in range(3)
    ]
    encoder = TransformerEncoder(region_projection(7, D, 0.0), layers).eval()
    generator = torch.Generator().manual_seed(0)
    encoder(torch.randn(2, 5, 7), random_boxes(2, 5, generator), torch.ones(2, 5, dtype=torch.bool))
    assert len(calls) == 1


# --- parameters, options and placement ----------------------------------------------------------------------


def gsa_parameters(phi: list[str], d_model: int = 512, heads: int = 8, d_g: int | None = None) -> int:
    module = build_attention("gsa", d_model=d_model, num_heads=heads, options={"phi": phi, "d_g": d_g})
    return sum(p.numel() for p in module.geometric_bias.parameters())


def test_geometric_parameters_by_formula() -> None:
    fc = 4 * 64 + 64  # Eq. 9, shared by the heads
    assert gsa_parameters(["content_independent"]) == fc + 8 * 64  # + w_g per head, no bias
    assert gsa_parameters(["query_dependent"]) == fc + 512 * 512 + 512  # + W_Q' (d x H d_g) and its bias
    assert gsa_parameters(["key_dependent"]) == fc + 512 * 512 + 512
    assert gsa_parameters(list(PHIS)) == fc + 8 * 64 + 2 * (512 * 512 + 512)
    assert gsa_parameters(["query_dependent"], d_g=16) == 4 * 16 + 16 + 512 * 128 + 128


def test_only_encoder_self_attention_with_geometry() -> None:
    dims = AttentionDims(16, 4)
    for name in ("gsa", "ngsa"):
        check_placement(name, dims, site=Site.ENCODER_SELF, where="s", has_geometry=True)
        with pytest.raises(ConfigError, match=f"s: attention '{name}' needs box geometry"):
            check_placement(name, dims, site=Site.ENCODER_SELF, where="s")  # e.g. a question's self-attention
        for site in (Site.DECODER_SELF, Site.CROSS):
            with pytest.raises(ConfigError, match=f"not allowed at {site.value} sites"):
                check_placement(name, dims, site=site, where="s", has_geometry=True)
    module = build_mechanism("gsa", Site.ENCODER_SELF)
    x = torch.randn(1, 3, D)
    with pytest.raises(ValueError, match="needs box geometry"):
        module(x, x, x, context=AttentionContext(Site.ENCODER_SELF))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"phi": []}, r"options\.phi: give each variant once, at least one"),
        ({"phi": ["query_dependent", "query_dependent"]}, r"options\.phi: give each variant once"),
        ({"phi": ["relative"]}, r"options\.phi\[0\]: 'relative' is not one of: content_independent"),
        ({"d_g": 0}, r"options\.d_g: must be >= 1"),
        ({"geometry": "abs"}, r"options\.geometry: 'abs' is not one of: paper, signed"),
        ({"norm": "layer"}, r"unknown config key model\.encoder_self_attention\.options\.norm"),
    ],
)
def test_option_errors_name_the_key(options: dict, message: str) -> None:
    data = {"model": {"d_model": 16, "num_heads": 2, "encoder_self_attention": {"name": "gsa", "options": options}}}
    with pytest.raises(ConfigError, match=message):
        valid_config(data)


def test_ngsa_takes_both_sets_of_options() -> None:
    module = build_attention("ngsa", d_model=16, num_heads=2, options={"norm": "layer", "affine": True, "phi": ["key_dependent"], "d_g": 4})
    assert module.query_norm.weight is not None and module.q_proj.bias is not None  # LN keeps the bias
    assert module.geometric_bias.key_proj.out_features == 2 * 4 and module.geometric_bias.query_proj is None


def test_reorder_keeps_both_relative_tables() -> None:
    geometry = BoxGeometry(random_boxes(3, 4, torch.Generator().manual_seed(1)))
    paper, signed = geometry.relative, geometry.relative_signed
    index = torch.tensor([2, 0, 2])
    reordered = geometry.reorder(index)
    assert {"relative", "relative_signed"} <= reordered.__dict__.keys()
    torch.testing.assert_close(reordered.relative, paper[index])
    torch.testing.assert_close(reordered.relative_signed, signed[index])
