"""Parameter counts, FLOP counts and latency of a tiny captioner; `vlattn profile` on every shipped preset."""

from __future__ import annotations


import pytest
from tests.models.conftest import FEATURE_DIM, VOCAB, tiny_captioner

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from vlattn.attention.sla import GridPositionalBias
from vlattn import shipped_presets as presets
from vlattn.config import resolve_config_dict
from vlattn.validation import load_valid_config
from vlattn.errors import ConfigError
from vlattn.layers.packed import ONEDNN_LINEAR
from vlattn.models.profile import FLOP_FORMULAS, count_parameters, flops_decode_step, flops_train_step, latency
from vlattn.tasks import task_of
from vlattn.tasks.base import ProfileShapes

PRESETS = presets.names()
SHAPES = dict(batch=2, regions=5, length=6, feature_dim=FEATURE_DIM, vocab=VOCAB)


def test_count_parameters_per_module() -> None:
    model = tiny_captioner()
    counts = count_parameters(model)
    assert set(counts) == {"total", "encoder", "decoder"}
    assert counts["total"] == counts["encoder"] + counts["decoder"] == sum(p.numel() for p in model.parameters())


def test_flops_of_training_and_decoding_steps() -> None:
    model = tiny_captioner()
    train = flops_train_step(model, **SHAPES)
    cached = flops_decode_step(model, **SHAPES)
    model.use_cache = False
    uncached = flops_decode_step(model, **SHAPES)
    assert 0 < cached < uncached < train
    assert all(p.grad is None for p in model.parameters())
    # the output layer alone: 2 * B * d * V multiply-adds per decoding step
    assert cached > 2 * 2 * 16 * VOCAB


def test_latency_reports_milliseconds() -> None:
    timings = latency(tiny_captioner(), **SHAPES, repeats=2)
    assert set(timings) == {"train_step_ms", "decode_step_ms"} and all(v > 0 for v in timings.values())


# size keys of the presets and their reduced values (every other key, mechanism and option stays the preset's)
MODEL_SIZES = {"feature_dim": 12, "d_ff": 32}
LAYERS = 2
OPTION_SIZES = {"embed_dim": 8, "attention_dim": 8, "word_dim": 8, "flat_hidden": 8, "flat_out": 16, "lstm_dim": 8,
                "fusion_dim": 16, "object_layers": LAYERS}
DICTIONARY_SIZE, MEMORY_SLOTS = 5, 3


def reduced(name: str) -> tuple[list[str], ProfileShapes]:
    """Overrides shrinking preset ``name`` to a few thousand parameters with the preset's structure (kind,
    mechanisms, their options), and profile shapes with 5 regions by default (a model reading a fixed grid gets its
    grid's cells: :meth:`ProfileShapes.for_model`)."""
    model = resolve_config_dict(name)["model"]  # the keys the preset gives (its base chain merged in)
    sets = [f"model.{key}={value}" for key, value in MODEL_SIZES.items() if key in model]
    sets.append(f"model.d_model={4 * model.get('num_heads', 4)}")
    sets += [f"model.{key}={min(model[key], LAYERS)}" for key in ("encoder_layers", "decoder_layers") if key in model]
    options = model.get("options", {})
    sets += [f"model.options.{key}={value}" for key, value in OPTION_SIZES.items() if key in options]
    sets += [f"model.options.{key}.size={DICTIONARY_SIZE}" for key in options if key.endswith("dictionary")]
    for site, spec in model.items():
        spec_options = spec.get("options", {}) if isinstance(spec, dict) else {}
        if "slots" in spec_options:
            sets.append(f"model.{site}.options.slots={MEMORY_SLOTS}")
        if "dictionary" in spec_options:
            sets.append(f"model.{site}.options.dictionary.size={DICTIONARY_SIZE}")
    return sets, ProfileShapes(batch=2, length=4, vocab_size=30, repeats=1, answers=10, default_regions=5)


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_profiles(name: str) -> None:
    """`vlattn profile` runs on every shipped preset (reduced in size, structure kept): parameters, FLOPs of a
    training step above those of inference, latency. Regression: every CATT preset failed in torch's FLOP
    counter ("Expected gradient function to be set") at its first no-grad pass."""
    overrides, shapes = reduced(name)
    cfg = load_valid_config(name, overrides)
    report = task_of(cfg.task).profile(cfg, shapes)
    assert report["model"] == cfg.model.kind
    grid = cfg.model.options.get("attention", {}).get("options", {})
    expected_regions = grid["grid_cells"] if grid.get("position") == "grid" else 5
    assert report["shapes"]["batch"] == 2 and report["shapes"]["regions"] == expected_regions
    train, inference = report["flops"].values()
    assert train > inference > 0
    assert 0 < report["parameters"]["total"] < 200_000
    assert all(ms > 0 for ms in report["latency_ms"].values())


def test_profile_regions_default_to_the_models_grid() -> None:
    """Regions not given: a model reading a fixed grid gets its grid's cells, any other model the task default;
    regions given win; two grids of different sizes in one model are a one-line error."""
    grid = nn.ModuleList([GridPositionalBias(8, 1, 36), GridPositionalBias(8, 1, 36)])
    plain = nn.Linear(2, 2)
    assert ProfileShapes(default_regions=100).for_model(grid).regions == 36
    assert ProfileShapes(default_regions=100).for_model(plain).regions == 100
    assert ProfileShapes(regions=7).for_model(grid).regions == 7
    with pytest.raises(ConfigError, match=r"different grids: \[16, 36\] cells"):
        ProfileShapes().for_model(nn.ModuleList([GridPositionalBias(8, 1, 36), GridPositionalBias(8, 1, 16)]))


@pytest.mark.skipif(not ONEDNN_LINEAR, reason="torch built without oneDNN's linear")
def test_flop_formulas_count_onednn_linear_as_the_addmm_it_replaces() -> None:
    """x (2, 3, 8) by a weight packed for oneDNN (24, 8): 2 x 6 rows x 8 x 24 FLOPs, what nn.Linear's addmm counts."""
    torch.manual_seed(0)
    x, weight, bias = torch.randn(2, 3, 8), torch.randn(24, 8), torch.randn(24)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, 6)
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=FLOP_FORMULAS) as counter:
        out = torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    assert counter.get_flop_counts()["Global"] == {torch.ops.mkldnn._linear_pointwise: 2 * 6 * 8 * 24}
    assert torch.allclose(out, torch.nn.functional.linear(x, weight, bias), atol=1e-5)
    with FlopCounterMode(display=False) as reference:
        torch.nn.functional.linear(x, weight, bias)
    assert reference.get_total_flops() == 2 * 6 * 8 * 24
