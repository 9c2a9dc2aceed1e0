"""Beam search vs greedy decoding of trained captioners: scores and the model's own log-probability of the captions.

For each run (its best checkpoint), split and beam size K (1 = greedy), decode every image, score the captions
(Bleu, CIDEr-D) and compute, by teacher forcing (independently of the decoders), sum log p(caption | image) of
each decoded caption. A beam caption the model finds *more* probable than greedy's but that scores worse points at
the model (the mode of its caption distribution is a poor caption); a *less* probable one is a search error of
beam search (the K best prefixes need not include greedy's; only K = 1 must reproduce greedy). Also reports the
mean caption length, the number of distinct captions and the share of the most frequent caption (generic captions
repeat across images).

Each run's figures are cached in ``--cache`` (one JSON per run), so a driver can run one run per call
(e.g. under a job queue) and a last call with every run writes the section of benchmarks/RESULTS.md.
Usage: ``python benchmarks/beam_vs_greedy.py --runs RUN [RUN ...] --cache DIR [--beams 1 2 3 5]
[--splits val test] [--data ROOT] [--heading TEXT] [--no-write]``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import Counter
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from results import mean_sd, write_section

from vlattn.data.captioning import collate_eval
from vlattn.data.vocab import Vocabulary
from vlattn.decoding import beam_search, greedy_decode
from vlattn.tasks.captioning import CaptionData, build_model, load_caption_data, references_of, score_predictions
from vlattn.training.checkpoint import load_checkpoint, load_weights

METRICS = ("Bleu_1", "Bleu_4", "CIDEr")


def caption_log_probs(model: torch.nn.Module, inputs: dict, tokens: torch.Tensor, vocab: Vocabulary) -> torch.Tensor:
    """sum_t log p(w_t | w_<t, image) (B,) of ``tokens`` (B, L) (EOS included when present, padding after it),
    by teacher forcing."""
    bos = torch.full_like(tokens[:, :1], vocab.BOS)
    log_probs = model(inputs, torch.cat([bos, tokens[:, :-1]], dim=1)).log_softmax(dim=-1)  # (B, L, V)
    chosen = log_probs.gather(2, tokens[:, :, None]).squeeze(2)  # (B, L)
    eos = (tokens == vocab.EOS).long()
    after_eos = (eos.cumsum(dim=1) - eos) > 0  # (B, L) positions after the first EOS
    return chosen.masked_fill(after_eos, 0.0).sum(dim=1)


def decode(model: torch.nn.Module, inputs: dict, vocab: Vocabulary, beam: int, max_len: int) -> torch.Tensor:
    """Greedy tokens for ``beam == 1``, else beam search's best beam (B, L); as ``vlattn eval`` decodes."""
    if beam == 1:
        return greedy_decode(model, inputs, bos=vocab.BOS, eos=vocab.EOS, max_len=max_len)
    return beam_search(model, inputs, bos=vocab.BOS, eos=vocab.EOS, beam_size=beam, max_len=max_len).tokens[:, 0]


def measure_split(model: torch.nn.Module, data: CaptionData, split: str, vocab: Vocabulary, beams: list[int], max_len: int) -> dict:
    """Per beam size: scores, mean log-prob and length, and the per-image comparison with the greedy caption."""
    dataset = data.eval_set(split)
    loader = DataLoader(dataset, batch_size=50, shuffle=False, collate_fn=collate_eval)
    captions: dict[int, dict[int, str]] = {k: {} for k in beams}
    log_probs: dict[int, list[float]] = {k: [] for k in beams}
    lengths: dict[int, list[int]] = {k: [] for k in beams}
    greedy: list[float] = []
    with torch.no_grad():
        for batch in loader:
            inputs = {key: value for key, value in batch.items() if torch.is_tensor(value)}
            greedy += caption_log_probs(model, inputs, decode(model, inputs, vocab, 1, max_len), vocab).tolist()
            for k in beams:
                tokens = decode(model, inputs, vocab, k, max_len)
                log_probs[k] += caption_log_probs(model, inputs, tokens, vocab).tolist()
                for image_id, row in zip(batch["image_ids"].tolist(), tokens.tolist()):
                    caption = vocab.decode(row)
                    captions[k][int(image_id)] = caption
                    lengths[k].append(len(caption.split()))
    references = references_of(dataset)
    out = {}
    for k in beams:
        scores = score_predictions(captions[k], references, metrics=("BLEU", "CIDEr"))["scores"]
        counts = Counter(captions[k].values())
        diffs = [b - g for b, g in zip(log_probs[k], greedy)]
        out[str(k)] = {
            **{m: scores[m] for m in METRICS},
            "log_prob": statistics.mean(log_probs[k]),
            "length": statistics.mean(lengths[k]),
            "greedy_higher": sum(d < -1e-4 for d in diffs) / len(diffs),
            "beam_higher": sum(d > 1e-4 for d in diffs) / len(diffs),
            "distinct": len(counts),
            "top_caption": counts.most_common(1)[0][0],
            "top_share": counts.most_common(1)[0][1] / len(captions[k]),
        }
    return out


def measure_run(run: Path, beams: list[int], splits: list[str], data_root: Path | None) -> dict:
    """Every split of :func:`measure_split` for the best checkpoint of ``run`` (data: ``data_root``, default the
    run's ``data.root``)."""
    torch.set_num_threads(1)
    checkpoint = load_checkpoint(run)
    if data_root is not None:
        checkpoint.config.data.root = str(data_root)
    vocab = checkpoint.vocabulary("words", Vocabulary.load)
    data = load_caption_data(checkpoint.config.data, vocab)
    model = build_model(checkpoint.config, vocab, data.store.dim)
    load_weights(model, checkpoint)
    model.eval()
    max_len = checkpoint.config.eval.max_len
    return {split: measure_split(model, data, split, vocab, beams, max_len) for split in splits}


def table(results: dict[str, dict], split: str, beams: list[int]) -> str:
    """Mean ± sd over runs of one split, one row per beam size."""
    header = ("| K | " + " | ".join(METRICS) + " | mean log p | mean words | greedy's caption more probable "
              "| beam's more probable | distinct captions | most frequent caption (share) |")
    lines = [header, "|" + "---|" * (len(METRICS) + 7)]
    for k in beams:
        rows = [r[split][str(k)] for r in results.values()]
        cell = lambda key, digits, rows=rows: mean_sd([row[key] for row in rows], digits)  # noqa: E731
        top = Counter(row["top_caption"] for row in rows).most_common(1)[0][0]
        share = mean_sd([row["top_share"] for row in rows], 2)
        lines.append(f"| {k} | " + " | ".join(cell(m, 3) for m in METRICS)
                     + f" | {cell('log_prob', 2)} | {cell('length', 1)} | {cell('greedy_higher', 2)} | "
                     f"{cell('beam_higher', 2)} | {cell('distinct', 0)} | \"{top}\" ({share}) |")
    return "\n".join(lines)


def per_run(results: dict[str, dict], splits: list[str], beams: list[int]) -> str:
    """CIDEr-D of every run, split and beam size."""
    columns = [(split, k) for split in splits for k in beams]
    lines = ["| run | " + " | ".join(f"{split} K={k}" for split, k in columns) + " |", "|---|" + "---|" * len(columns)]
    for name, figures in results.items():
        lines.append(f"| {name} | " + " | ".join(f"{figures[split][str(k)]['CIDEr']:.3f}" for split, k in columns) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="run directories (best checkpoints)")
    parser.add_argument("--cache", type=Path, required=True, help="directory of the per-run JSON figures")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 2, 3, 5])
    parser.add_argument("--splits", nargs="+", default=["val", "test"])
    parser.add_argument("--data", type=Path, default=None, help="data root (default: each run's data.root)")
    parser.add_argument("--heading", default="Beam search vs greedy (Up-Down)")
    parser.add_argument("--note", default="", help="the reading, printed under the tables")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    results = {}
    for run in args.runs:
        path = args.cache / f"{run.name}_K{'-'.join(map(str, args.beams))}_{'-'.join(args.splits)}.json"
        if not path.is_file():
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(measure_run(run, args.beams, args.splits, args.data), indent=1))
            tmp.replace(path)
        results[run.name] = json.loads(path.read_text())
    groups: dict[str, dict[str, dict]] = {}
    for name, figures in results.items():  # runs named MODEL-sSEED are averaged per model
        groups.setdefault(re.sub(r"-s\d+$", "", name), {})[name] = figures
    tables = "\n\n".join(f"{group}, {split} split ({len(runs)} runs):\n\n{table(runs, split, args.beams)}"
                         for group, runs in groups.items() for split in args.splits)
    tables += f"\n\nCIDEr-D of every run:\n\n{per_run(results, args.splits, args.beams)}"
    command = (f".venv/bin/python benchmarks/beam_vs_greedy.py --runs {' '.join(map(str, args.runs))} --cache {args.cache} "
               f"--beams {' '.join(map(str, args.beams))} --splits {' '.join(args.splits)}"
               + (f" --data {args.data}" if args.data else ""))  # the reading (--note) left out
    body = (f"Runs {', '.join(results)} (best checkpoints); mean ± sd over the runs of a model; K = 1 is greedy, K > 1 the best "
            f"beam (length_penalty 0). Log-probabilities by teacher forcing of the decoded captions; \"greedy's "
            f"caption more probable\": share of images where the greedy caption has a higher model log-probability "
            f"than the beam's.\n\n{tables}\n\n{args.note}\n\nCommand (one run per call, then all runs from the "
            f"cache): `{command}`")
    print(body)
    if not args.no_write:
        write_section(args.heading, body)


if __name__ == "__main__":
    main()
