"""Box channels (``model.box_input``): normalisation by image size, and boxes reach the model only when enabled."""

from __future__ import annotations

import torch
from tests.models.conftest import tiny_captioner, tiny_inputs

from vlattn.data.regions import normalize_boxes
from vlattn.layers.boxes import box_channels


def test_normalize_boxes_by_image_size() -> None:
    boxes = torch.tensor([[[10.0, 20.0, 50.0, 60.0], [0.0, 0.0, 0.0, 0.0]]])  # second row is padding
    sizes = torch.tensor([[100.0, 80.0]])  # width, height
    expected = torch.tensor([[[0.1, 0.25, 0.5, 0.75], [0.0, 0.0, 0.0, 0.0]]])
    assert torch.allclose(normalize_boxes(boxes, sizes), expected)


def test_box_channels_add_relative_area() -> None:
    boxes = torch.tensor([[[0.1, 0.25, 0.5, 0.75]]])
    assert torch.allclose(box_channels(boxes), torch.tensor([[[0.1, 0.25, 0.5, 0.75, 0.4 * 0.5]]]))


def _logits(model: torch.nn.Module, inputs: dict[str, torch.Tensor], boxes: torch.Tensor) -> torch.Tensor:
    return model({"features": inputs["features"], "boxes": boxes, "region_mask": inputs["region_mask"]}, inputs["tokens"])


def test_boxes_matter_only_with_box_input() -> None:
    inputs = tiny_inputs()
    moved = inputs["boxes"].flip(1)  # same boxes, assigned to other regions
    plain, boxed = tiny_captioner(), tiny_captioner(box_input=True)
    assert torch.equal(_logits(plain, inputs, inputs["boxes"]), _logits(plain, inputs, moved))
    assert not torch.allclose(_logits(boxed, inputs, inputs["boxes"]), _logits(boxed, inputs, moved))
    # The encoder input grows by the five box channels.
    extra = sum(p.numel() for p in boxed.parameters()) - sum(p.numel() for p in plain.parameters())
    assert extra == 5 * boxed.encoder.input_proj[0].out_features
    # Cached decoding with boxes still equals teacher forcing at the first step.
    state = boxed.encode({k: inputs[k] for k in ("features", "boxes", "region_mask")})
    first, _ = boxed.step(inputs["tokens"][:, :1], state)
    assert torch.allclose(first, _logits(boxed, inputs, inputs["boxes"])[:, 0].log_softmax(-1), atol=1e-5)
