"""The roofline benchmark's accounting (benchmarks/bench_roofline.py): oneDNN's packed linear counted and recorded as
the GEMM it is, and which recorded products the best-kernel bound may run packed."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from vlattn.layers.packed import ONEDNN_LINEAR, PackedWeight

pytestmark = pytest.mark.skipif(not ONEDNN_LINEAR, reason="torch built without oneDNN's linear")


@pytest.fixture(scope="module")
def bench(import_benchmark):
    return import_benchmark("bench_roofline")


class PackedLayer(nn.Linear):
    """``nn.Linear`` computed as oneDNN's linear on its packed weight (what ``--packed-output`` runs)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "packed"):
            self.packed = PackedWeight()
        return self.packed(self, x)


def packed_layer(in_features: int, out_features: int, bias: bool = True) -> PackedLayer:
    torch.manual_seed(0)
    return PackedLayer(in_features, out_features, bias=bias)


def test_flop_count_of_the_packed_linear_is_addmms(bench):
    layer, x = packed_layer(8, 24), torch.randn(2, 3, 8)
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=bench.EXTRA_FLOPS) as counter:
        layer(x)
    assert counter.get_flop_counts()["Global"] == {bench.LINEAR: 2 * 6 * 8 * 24}  # rows 2 x 3, in 8, out 24


def test_recorder_replays_the_packed_linear_as_nn_linears_addmm(bench):
    with_bias, without = packed_layer(8, 24), packed_layer(8, 16, bias=False)
    parameters = {p.data_ptr() for layer in (with_bias, without) for p in layer.parameters()}
    recorder = bench.GemmRecorder(parameters)
    with torch.no_grad(), recorder:
        without(with_bias(torch.randn(5, 8))[:, :8])
    assert recorder.flops == 2 * 5 * 8 * 24 + 2 * 5 * 8 * 16
    first, second = recorder.gemms
    assert first.func == torch.ops.aten.addmm.default and second.func == torch.ops.aten.mm.default
    bias, x, transposed = first.args
    assert (bias.shape, x.shape, transposed.shape, transposed.stride) == ((24,), (5, 8), (8, 24), (1, 8))
    assert first.linear.shape == (5, 8, 24, True) and second.linear.shape == (5, 8, 16, False)
    assert first.linear.weight.weight is not None and first.linear.weight.weight != second.linear.weight.weight
    assert [len(times) for times in bench.replay_seconds(recorder.gemms, packed_first=True)] == [2, 2]


def test_products_by_weights_and_by_activations(bench):
    torch.manual_seed(0)
    layer, other = nn.Linear(8, 8), nn.Linear(8, 8)
    recorder = bench.GemmRecorder({p.data_ptr() for m in (layer, other) for p in m.parameters()})
    with torch.no_grad(), recorder:
        x = torch.randn(4, 8)
        h = layer(x)  # addmm by a parameter
        joined = torch.cat([layer.weight, other.weight])  # a weight computed from weights alone, (16, 8)
        torch.nn.functional.linear(h, joined)  # mm by it
        torch.mm(h, h.t())  # by an activation
        torch.bmm(h[None], h.t()[None])
    by_weight, by_joined, by_activation, batched = recorder.gemms
    assert by_weight.linear.shape == (4, 8, 8, True)
    assert by_joined.linear.shape == (4, 8, 16, False)
    assert by_joined.linear.weight.weight not in {by_weight.linear.weight.weight, None}
    assert by_activation.linear is None and batched.linear is None
