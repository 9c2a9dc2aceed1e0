"""``vlattn explain``: what a trained model attends to for one image, as an HTML page with PNGs beside it.

The model runs as it does in use — the caption ``vlattn caption`` gives (the run's decoding: greedy or beam search),
then the model stepped through that caption's words inside an :class:`~vlattn.viz.capture.AttentionRecorder` (a
word's attention depends only on the words before it, so these are the calls along the chosen beam's ancestry that
produced each word); or one forward pass answering the question inside the recorder — and every picture is drawn
from the recorded calls:

- the image with its region boxes (the data set's picture when the data has one, ``--image FILE`` for another,
  else the boxes on a blank canvas of the image's size);
- captioning: for each generated word, the attention over regions of every decoder cross site (mean over heads,
  M2's encoder levels averaged, CATT's in-sample call), and per head for the last site; Up-Down's top-down
  attention; stacked / SLA: every unit's map; M2: the meshed gate of each encoder level per word (mean over the
  channels) and the share of encoder attention on memory slots; CATT: the share of the in-sample stream in the
  fused output per word; NG-SAN: the geometry bias phi from the region the first word attends most to the others;
- VQA: the top-5 answers with their scores, the attention-reduction (AttFlat) weights over the regions and over
  the question words, and the question-guided attention of the last image layer (regions x words).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from vlattn.catt.dictionary import GlobalDictionary
from vlattn.data.features import open_store
from vlattn.data.karpathy import load_karpathy
from vlattn.data.vqa import question_tokens
from vlattn.errors import ConfigError, DataError
from vlattn.io import atomic_write_text, make_temporary_dir, replace_dir
from vlattn.tasks import Answerer, Captioner, load_predictor
from vlattn.viz import figures
from vlattn.viz.capture import AttentionRecorder, Call


@dataclass
class Page:
    """The explanation being built: a title, sections of (heading, text, image file), and the PNG bytes."""

    title: str
    sections: list[tuple[str, str, str | None]] = field(default_factory=list)
    images: dict[str, bytes] = field(default_factory=dict)

    def add(self, heading: str, text: str = "", name: str | None = None, png: bytes | None = None) -> None:
        if name is not None and png is not None:
            self.images[name] = png
        self.sections.append((heading, text, name if png is not None else None))

    def html(self) -> str:
        body = "".join(
            f"<h2>{html.escape(heading)}</h2>" + (f"<p>{html.escape(text)}</p>" if text else "")
            + (f"<img src='{html.escape(name)}' alt='{html.escape(heading)}'>" if name else "")
            for heading, text, name in self.sections
        )
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                f"<style>body{{font-family:sans-serif;max-width:1400px}} img{{max-width:100%}}</style></head>"
                f"<body><h1>{html.escape(self.title)}</h1>{body}</body></html>\n")


def image_canvas(root: Path, karpathy: str, image_id: int, size: tuple[int, int], image: Path | None) -> figures.Canvas:
    """The picture of ``image_id``: ``image`` if given, else the data set's file when it exists, else None (a blank
    canvas of ``size``)."""
    if image is not None:
        try:
            return Image.open(image).convert("RGB"), size
        except OSError as err:
            raise DataError(f"cannot read the image: {err}", path=image) from err
    path = root / karpathy
    if path.is_file():
        for entry in load_karpathy(path):
            if entry.image_id == image_id and entry.filename:
                for folder in (root / "images", root):
                    if (folder / entry.filename).is_file():
                        return Image.open(folder / entry.filename).convert("RGB"), size
    return None, size


def _mean_heads(call: Call) -> np.ndarray:
    """(H, Nq, Nk) of one image -> (Nk,) for its last query, mean over heads."""
    return call.value[0, :, -1].mean(0).numpy()


def explain(checkpoint: str | Path, image_id: int, out: Path, *, question: str | None = None,
            image: Path | None = None, device: str = "cpu") -> Path:
    """Write ``out``/index.html with its PNGs (see the module docstring); ``out`` must not exist (it is created
    whole, never replacing anything). Returns the page's path."""
    if out.exists() or out.is_symlink():
        raise DataError("exists; explain writes a new directory", path=out)
    predictor = load_predictor(checkpoint, device)
    config = predictor.config
    root = Path(config.data.root)
    store = open_store(root / config.data.features)
    if image_id not in store:
        raise DataError(f"image id {image_id} is not in the feature store", path=root / config.data.features)
    regions = store.get(image_id)
    count = min(len(regions.boxes), config.data.max_regions)
    boxes = np.asarray(regions.boxes[:count])
    canvas = image_canvas(root, config.data.karpathy, image_id, (int(regions.width), int(regions.height)), image)
    page = Page(f"vlattn explain: image {image_id} ({config.model.kind})")
    page.add("Image and regions", f"{count} regions; checkpoint {checkpoint}", "regions.png",
             figures.regions_figure(canvas, boxes))
    with torch.no_grad():
        if isinstance(predictor, Captioner):
            if question is not None:
                raise ConfigError("--question: a captioning checkpoint answers no questions")
            explain_caption(page, predictor, store, image_id, canvas, boxes)
        elif isinstance(predictor, Answerer):
            if question is None:
                raise ConfigError("--question: a VQA checkpoint needs the question to answer")
            explain_answer(page, predictor, store, image_id, question, canvas, boxes)
    tmp = make_temporary_dir(out)
    for name, png in page.images.items():
        (tmp / name).write_bytes(png)
    atomic_write_text(tmp / "index.html", page.html())
    replace_dir(tmp, out)
    return out / "index.html"


def explain_caption(page: Page, predictor: Captioner, store, image_id: int, canvas: figures.Canvas,  # noqa: ANN001
                    boxes: np.ndarray) -> None:
    regions = len(boxes)
    caption = predictor.caption(store=store, ids=[image_id])[0]
    with AttentionRecorder(predictor.model) as recorder:
        log_probs = predictor.word_log_probs([caption], store=store)[0]
    words = [*caption.tokens, *["<eos>"] * caption.ended]
    decoding = "greedy decoding" if predictor.beam_size == 1 else f"beam search, beam {predictor.beam_size}"
    page.add(f"Caption ({decoding})", f"{caption.text!r}  (log-probability {sum(log_probs):.3f})")
    meshed = bool(recorder.of("gates"))
    per_word: list[dict[str, np.ndarray]] = []  # word -> site -> (H, N) weights
    units, gates, streams = [], [], []
    for index in range(len(words)):
        sites: dict[str, list[Call]] = {}
        for call in recorder.step_calls(index):
            if call.kind == "attention" and not call.site.endswith("self_attn") and call.value.shape[-1] == regions:
                sites.setdefault(call.site, []).append(call)
            elif call.kind == "units" and call.value.shape[-1] == regions:
                units.append(call.value[:, 0, 0, -1].numpy())  # (T, N)
            elif call.kind == "gates":
                gates.append((call.site, call.value[:, 0, -1].mean(-1).numpy()))  # (levels,)
            elif call.kind == "streams":
                streams.append(call.value[:, 0, -1].numpy())  # (2,) norms of the two streams
        per_word.append({site: torch.stack([c.value[0, :, -1] for c in (calls if meshed else calls[:1])]).mean(0)
                         .numpy() for site, calls in sites.items()})
    site_names = list(per_word[0]) if per_word else []
    if site_names:
        maps = np.stack([np.stack([w[s].mean(0) for s in site_names]) for w in per_word])  # (words, sites, N)
        page.add("Attention over regions per word", "mean over heads; one column per decoder cross site"
                 + (" (encoder levels averaged)" if meshed else ""), "words.png",
                 figures.overlay_grid(canvas, boxes, maps, words, [s.replace(".attention", "") for s in site_names]))
        last = site_names[-1]
        heads = np.stack([w[last] for w in per_word])  # (words, H, N)
        page.add(f"Per head: {last}", "", "heads.png",
                 figures.overlay_grid(canvas, boxes, heads, words, [f"head {h}" for h in range(heads.shape[1])]))
    if units:
        stacks = np.stack(units)  # (words, T, N)
        page.add("Stacked attention: every unit's map", "", "units.png",
                 figures.overlay_grid(canvas, boxes, stacks, words, [f"unit {t + 1}" for t in range(stacks.shape[1])]))
    if gates:
        layers = list(dict.fromkeys(site for site, _ in gates))
        matrix = np.stack([np.concatenate([g for s, g in gates[i * len(layers):(i + 1) * len(layers)]])
                           for i in range(len(words))])  # (words, layers x levels)
        levels = len(gates[0][1])
        page.add("M2: meshed gates per word", "alpha of each encoder level (mean over channels), per decoder layer",
                 "gates.png", figures.heatmap(matrix, words, [f"{s.split('.')[2]}:{lv + 1}" for s in layers
                                                               for lv in range(levels)], "decoder layer:level"))
        slots = [(c.site, float(c.value[..., regions:].sum(-1).mean())) for c in recorder.calls[: recorder.steps[0]]
                 if c.kind == "attention" and c.value.shape[-1] > regions]
        if slots:
            page.add("M2: share of encoder attention on memory slots", "", "memory.png",
                     figures.bars(np.array([s for _, s in slots]), [n for n, _ in slots], "memory share"))
    if streams:
        share = np.array([s[0] / max(s.sum(), 1e-12) for s in streams])
        page.add("CATT: in-sample share of the fused output per word",
                 "|Z^| / (|Z^| + |X^|) at the fusion (1: in-sample only)", "streams.png",
                 figures.bars(share, words[: len(share)], "in-sample share"))
    dictionary_panels(page, predictor, recorder, store, regions)
    geometry = [c for c in recorder.calls[: recorder.steps[0] if recorder.steps else 0] if c.kind == "geometry"]
    if geometry and site_names:
        source = int(maps[0, -1].argmax())
        phi = geometry[-1].value[0].mean(0)[source].numpy()  # (N,) bias from region `source` to each region
        page.add(f"NG-SAN: geometry bias from region {source}", f"{geometry[-1].site}, mean over heads (shifted to >= 0)",
                 "geometry.png", figures.overlay_grid(canvas, boxes, (phi - phi.min())[None, None], ["phi"],
                                                      [f"from region {source}"]))


def explain_answer(page: Page, predictor: Answerer, store, image_id: int, question: str,  # noqa: ANN001
                   canvas: figures.Canvas, boxes: np.ndarray) -> None:
    regions = len(boxes)
    with AttentionRecorder(predictor.model) as recorder:
        answers = predictor.answer(question, store=store, ids=[image_id])[0]
    words = question_tokens(question)
    page.add("Question and answers", question + " -> " + ", ".join(f"{a.answer} ({a.score:.3f})" for a in answers),
             "answers.png", figures.bars(np.array([a.score for a in answers]), [a.answer for a in answers], "top-5"))
    for call in recorder.of("reduction"):
        weights = call.value[0].mean(0).numpy()  # (N,) over the glimpses
        if weights.shape[0] == regions:
            page.add("Attention reduction over the regions", call.site, "reduction-regions.png",
                     figures.overlay_grid(canvas, boxes, weights[None, None], ["AttFlat"], ["regions"]))
        else:
            page.add("Attention reduction over the question words", call.site, "reduction-words.png",
                     figures.bars(weights[: len(words)], words[: len(weights)], "weight"))
    for call in recorder.of("units"):  # the twin-stream model's streams: every unit's map
        maps = call.value[:, 0, 0, -1].numpy()  # (T, K)
        units = [f"unit {t + 1}" for t in range(maps.shape[0])]
        if maps.shape[-1] == regions:
            page.add(f"Stacked attention over the regions: {call.site}", "", f"units-{call.site}.png",
                     figures.overlay_grid(canvas, boxes, maps[None], [call.site], units))
        else:
            page.add(f"Stacked attention over the question: {call.site}", "", f"units-{call.site}.png",
                     figures.heatmap(maps[:, : len(words)], units, words[: maps.shape[-1]], "units x words"))
    guided = [c for c in recorder.of("attention") if c.value.shape[-2] == regions and c.value.shape[-1] != regions]
    if guided:
        matrix = guided[-1].value[0].mean(0).numpy()[:, : len(words)]  # (N regions, words)
        page.add("Question-guided attention (last image layer)", guided[-1].site + ": regions (rows) over words",
                 "guided.png", figures.heatmap(matrix, [str(i) for i in range(regions)], words[: matrix.shape[1]],
                                               "regions x question words"))


NEIGHBOURS, TOP_ENTRIES, REGION_SAMPLE = 3, 5, 300


def nearest(entries: torch.Tensor, candidates: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine similarity of each entry (E, D) to its ``k`` nearest ``candidates`` (C, D): values and indices (E, k)."""
    similarity = torch.nn.functional.normalize(entries, dim=-1) @ torch.nn.functional.normalize(candidates, dim=-1).T
    return similarity.topk(min(k, candidates.shape[0]), dim=-1)


def dictionary_panels(page: Page, predictor: Captioner, recorder: AttentionRecorder, store,  # noqa: ANN001
                      regions: int) -> None:
    """CATT: the dictionary entries the caption's cross-sample attention weighed most (attention calls over as many
    keys as a dictionary has entries, mean over heads, queries and calls), each shown by its nearest vocabulary
    words (word dictionaries: cosine to the word embeddings) or nearest training regions (image dictionaries:
    cosine to the regions of the first training images of the store)."""
    model = predictor.model
    for name, dictionary in model.named_modules():
        if not isinstance(dictionary, GlobalDictionary):
            continue
        entries = dictionary().detach().float().cpu()  # (K, D)
        size = entries.shape[0]
        calls = [c for c in recorder.of("attention") if c.value.shape[-1] == size != regions]
        if not calls:
            continue
        weight = torch.stack([c.value.mean(dim=(0, 1, 2)) for c in calls]).mean(0)  # (K,)
        top = weight.topk(min(TOP_ENTRIES, size))
        lines = []
        if dictionary.source == "word":
            table = model.word_embeddings.weight.detach().float().cpu()
            if table.shape[1] == entries.shape[1]:
                sims, ids = nearest(entries[top.indices], table, NEIGHBOURS)
                words = predictor.vocab.itos
                lines = [f"entry {int(e)} (weight {float(w):.3f}): " + ", ".join(
                    f"{words[int(i)]} ({float(c):.2f})" for c, i in zip(sim, idx, strict=True))
                    for e, w, sim, idx in zip(top.indices, top.values, sims, ids, strict=True)]
        else:
            ids = list(store.ids())[:REGION_SAMPLE]
            features, owners = [], []
            for image_id in ids:
                sample = store.get(image_id)
                features.append(torch.as_tensor(np.asarray(sample.features), dtype=torch.float32))
                owners += [(image_id, r) for r in range(len(sample.features))]
            bank = torch.cat(features)[:, : entries.shape[1] - dictionary.zero_channels]
            sims, idx = nearest(entries[top.indices][:, : bank.shape[1]], bank, NEIGHBOURS)
            lines = [f"entry {int(e)} (weight {float(w):.3f}): " + ", ".join(
                f"image {owners[int(i)][0]} region {owners[int(i)][1]} ({float(c):.2f})" for c, i in zip(sim, ix, strict=True))
                for e, w, sim, ix in zip(top.indices, top.values, sims, idx, strict=True)]
        page.add(f"CATT: most-attended {dictionary.source} dictionary entries ({name})",
                 " | ".join(lines) if lines else "entries " + ", ".join(str(int(e)) for e in top.indices),
                 f"dictionary-{dictionary.source}.png",
                 figures.bars(weight.numpy(), [str(k) for k in range(size)], f"mean attention per {dictionary.source} entry"))
