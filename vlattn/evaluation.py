"""Decode a split with a trained captioner and score it with the COCO caption metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch
from torch.utils.data import DataLoader

from vlattn.data.captioning import CaptionEvalSet, collate_eval
from vlattn.data.vocab import Vocabulary
from vlattn.decoding import beam_search, greedy_decode
from vlattn.io import atomic_write_text
from vlattn.metrics import evaluate_captions


def decode_dataset(
    model: torch.nn.Module,
    dataset: CaptionEvalSet,
    vocab: Vocabulary,
    *,
    beam_size: int = 5,
    max_len: int = 20,
    length_penalty: float = 0.0,
    batch_size: int = 50,
    device: torch.device = torch.device("cpu"),
) -> dict[int, str]:
    """Caption every image of ``dataset``: greedy when ``beam_size == 1``, else beam search (best beam)."""
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_eval)
    predictions: dict[int, str] = {}
    model.eval()
    with torch.no_grad():
        for batch in loader:
            inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
            if beam_size <= 1:
                tokens = greedy_decode(model, inputs, bos=vocab.BOS, eos=vocab.EOS, max_len=max_len)
            else:
                tokens = beam_search(
                    model, inputs, bos=vocab.BOS, eos=vocab.EOS, beam_size=beam_size, max_len=max_len,
                    length_penalty=length_penalty,
                ).tokens[:, 0]
            for image_id, row in zip(batch["image_ids"].tolist(), tokens.tolist()):
                predictions[int(image_id)] = vocab.decode(row)
    return predictions


def references_of(dataset: CaptionEvalSet) -> dict[int, list[str]]:
    """``{image_id: [raw reference strings]}`` of an evaluation set."""
    return {int(entry.image_id): list(entry.raw) for entry in dataset.entries}


def score_predictions(
    predictions: dict[int, str],
    references: dict[int, list[str]],
    *,
    collapse_repeats: bool = False,
    metrics: Sequence[str] = ("BLEU", "METEOR", "ROUGE_L", "CIDEr", "SPICE"),
    tokenizer_backend: str = "auto",
) -> dict[str, object]:
    """Metrics dict: scores plus ``unavailable`` (metric -> reason) for any that could not run."""
    report = evaluate_captions(
        references, predictions, collapse_repeats=collapse_repeats, metrics=tuple(metrics),
        tokenizer_backend=tokenizer_backend,
    )
    return report.to_dict()


def write_predictions(path: str | Path, predictions: dict[int, str]) -> None:
    """COCO results format ``[{"image_id": int, "caption": str}]``, written atomically."""
    rows = [{"image_id": image_id, "caption": caption} for image_id, caption in sorted(predictions.items())]
    atomic_write_text(path, json.dumps(rows, indent=1))
