"""Cost estimates of the paper recipes on their real data sizes (docs/reproduce.md, "Cost estimates").

For each preset: trainable parameters at the paper's vocabulary size; the memory of float32 weights, gradients and
Adam's two moments (16 bytes per parameter; activations are not included: they were not measured); the FLOPs of
one training sample counted by torch's FlopCounterMode on one sample at the recipe's largest shapes (captioning:
50 regions, a 20-word caption; VQA: 100 regions, 14 question words; the SLA preset: its 196 grid cells, 26 words),
so they are upper bounds for batches padded to shorter lengths; FLOPs scale linearly with the batch. An SCST sample
(one image) is counted as 5 forward/backward passes of a 20-word caption plus 20 beam-search decoding steps over 5
beams. Training FLOPs = FLOPs per sample x samples per epoch x epochs, with COCO Karpathy train+restval = 113,287
images, 566,747 captions and VQA v2 train2014 = 443,757 questions. Hours = training FLOPs / RATE, an assumed
sustained rate (not a measurement: no GPU was available).

Usage: python benchmarks/reproduce_costs.py [--rate 10] (TFLOP/s); prints a markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from vlattn.config import load_config
from vlattn.models import build_captioner, build_vqa_model
from vlattn.models.profile import count_flops, decode_step, random_batch, train_step
from vlattn.tasks.base import ProfileShapes
from vlattn.tasks.vqa import vqa_batch
from vlattn.training.answers import answer_loss

CAPTIONS, IMAGES, QUESTIONS = 566_747, 113_287, 443_757
BEAMS, LENGTH, REGIONS = 5, 20, 50
# preset -> vocabulary size of the paper's data (captioning: words; VQA: question words, candidate answers)
CAPTIONING = {"m2": 10201, "transformer": 9487, "san": 9487, "ng-san": 9487, "lw-transformer": 10201,
              "catt": 10201, "updown": 9487, "updown-catt": 9487}
VQA = {"vqa-mcan": (20000, 3129), "vqa-mcan-gsa": (20000, 3129), "vqa-lw": (20000, 3129), "vqa-catt": (20000, 3129),
       "vqa-sla": (20000, 3129)}


def captioning_row(name: str, vocab: int) -> dict:
    cfg = load_config(name)
    model = build_captioner(cfg.model, vocab)
    dim = cfg.model.feature_dim
    model.train()
    xe = count_flops(lambda: train_step(model, random_batch(1, REGIONS, LENGTH, dim, vocab)))
    model.eval()
    half = random_batch(BEAMS, REGIONS, LENGTH // 2, dim, vocab)  # a decoding step half-way through the caption
    decoding = count_flops(decode_step(model, half))
    scst = BEAMS * xe + LENGTH * decoding
    total = cfg.train.epochs * CAPTIONS * xe + cfg.train.scst_epochs * IMAGES * scst
    return {"preset": name, "params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "sample": f"XE {xe / 1e9:.2f} / SCST {scst / 1e9:.2f}",
            "epochs": f"{cfg.train.epochs} XE + {cfg.train.scst_epochs} SCST", "total": total}


def vqa_row(name: str, words: int, answers: int) -> dict:
    cfg = load_config(name)
    model = build_vqa_model(cfg.model, words, answers)
    shapes = ProfileShapes(batch=1, length=14, answers=answers, vocab_size=words, default_regions=100).for_model(model)
    if cfg.model.kind == "twin_stream":
        shapes = dataclasses.replace(shapes, length=cfg.data.max_question_len)
    inputs = vqa_batch(shapes, cfg.model.feature_dim)
    model.train()

    def step() -> None:
        answer_loss(model(inputs), inputs["targets"], cfg.train.bce_reduction).backward()
        model.zero_grad(set_to_none=True)

    sample = count_flops(step)
    return {"preset": name, "params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "sample": f"{sample / 1e9:.2f}", "epochs": f"{cfg.train.epochs}",
            "total": cfg.train.epochs * QUESTIONS * sample}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=10.0, help="assumed sustained TFLOP/s of one GPU")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = [captioning_row(n, v) for n, v in CAPTIONING.items()] + [vqa_row(n, *s) for n, s in VQA.items()]
    print("| preset | parameters | weights + gradients + Adam | GFLOPs per training sample | epochs | training "
          f"PFLOPs | hours at {args.rate:g} TFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        hours = row["total"] / (args.rate * 1e12) / 3600
        print(f"| `{row['preset']}` | {row['params']:,} | {row['params'] * 16 / 2**30:.2f} GiB | {row['sample']} | "
              f"{row['epochs']} | {row['total'] / 1e15:,.0f} | {hours:,.1f} |")


if __name__ == "__main__":
    main()
