"""One cross-entropy training step: our Transformer captioner vs. the same model built on
``torch.nn.Transformer`` (target: ours no slower than 1.1x).

Batch 10, 50 regions x 2048-d, captions of 20 input tokens, d=512, 8 heads, FFN 2048, 3+3 layers, dropout 0.1,
vocabulary 10201; a step is forward + cross-entropy + backward + Adam update. One thread; runs interleaved;
medians written to benchmarks/RESULTS.md ("## XE training step").
"""

from __future__ import annotations

import statistics

import torch
from results import paired_ratio, parse_args, publish, sized
from torch import Tensor, nn

from vlattn.config import ModelConfig
from vlattn.layers import sinusoidal_positions
from vlattn.models import build_captioner
from vlattn.models.profile import count_parameters, random_batch, time_interleaved
from vlattn.training.xe import xe_loss

VOCAB, BATCH, REGIONS, LENGTH, FEATURES = 10201, 10, 50, 20, 2048


class TorchTransformerCaptioner(nn.Module):
    """The reference: same input projection, embeddings, positions and output layer around ``nn.Transformer``."""

    def __init__(self, d_model: int = 512, heads: int = 8, d_ff: int = 2048, layers: int = 3, dropout: float = 0.1):
        super().__init__()
        self.input_proj = nn.Sequential(
            nn.Linear(FEATURES, d_model), nn.ReLU(), nn.Dropout(dropout), nn.LayerNorm(d_model)
        )
        self.embed = nn.Embedding(VOCAB, d_model, padding_idx=0)
        self.register_buffer("positions", sinusoidal_positions(64, d_model), persistent=False)
        self.transformer = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout, batch_first=True)
        self.output = nn.Linear(d_model, VOCAB)

    def forward(self, inputs: dict[str, Tensor], tokens: Tensor) -> Tensor:
        features, region_mask = inputs["features"], inputs["region_mask"]
        length = tokens.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(length)
        hidden = self.transformer(
            self.input_proj(features),
            self.embed(tokens) + self.positions[:length],
            tgt_mask=causal,
            src_key_padding_mask=~region_mask,
            memory_key_padding_mask=~region_mask,
            tgt_is_causal=True,
        )
        return self.output(hidden)


def xe_step(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: dict[str, Tensor]) -> None:
    """Forward, cross-entropy (padding ignored), backward, Adam update."""
    tokens = inputs["tokens"]
    logits = model(inputs, tokens[:, :-1])
    loss = xe_loss(logits, tokens[:, 1:], pad_id=0)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def main() -> None:
    args = parse_args(__doc__, repeats=10)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    inputs = random_batch(sized(args, BATCH, 2), REGIONS, LENGTH, FEATURES, VOCAB)
    inputs["region_mask"][:, 40:] = False  # some padded regions, as in real batches
    models = {
        "ours": build_captioner(ModelConfig(encoder_layers=3, decoder_layers=3), VOCAB).train(),
        "torch.nn.Transformer": TorchTransformerCaptioner().train(),
    }
    optimizers = {name: torch.optim.Adam(model.parameters(), lr=1e-5) for name, model in models.items()}
    runs = {name: (lambda name=name: xe_step(models[name], optimizers[name], inputs)) for name in models}
    times = time_interleaved(runs, args.repeats)
    medians = {name: statistics.median(values) for name, values in times.items()}
    rows = "\n".join(
        f"| {name} | {count_parameters(models[name])['total']:,} | {medians[name]:.0f} | "
        f"{', '.join(f'{t:.0f}' for t in times[name])} |"
        for name in models
    )
    ratio = medians["ours"] / medians["torch.nn.Transformer"]
    paired = paired_ratio(times["ours"], times["torch.nn.Transformer"])
    body = f"""Batch {BATCH}, {REGIONS} regions x {FEATURES}-d (10 padded), {LENGTH} input tokens, d=512, 8 heads,
FFN 2048, 3+3 layers, dropout 0.1, vocabulary {VOCAB}; forward + cross-entropy + backward + Adam step, train mode;
`torch.set_num_threads(1)`, {args.repeats} interleaved runs each, medians. The reference wraps
`torch.nn.Transformer` (which adds a final LayerNorm to each stack) in the same projection/embedding/output layers.

| model | parameters | median step (ms) | all runs (ms) |
|---|---|---|---|
{rows}

Ours / torch.nn.Transformer: **{ratio:.2f}x** from the medians, {paired:.2f}x median of the per-round ratios
(target <= 1.1x)."""
    publish("XE training step", body, args)


if __name__ == "__main__":
    main()
