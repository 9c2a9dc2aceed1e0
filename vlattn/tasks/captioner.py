"""A trained captioner for Python callers (:func:`vlattn.load`): the model with its vocabulary, special token ids
and decoding defaults, captioning region features given as arrays or read from a feature store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vlattn.config import Config
from vlattn.data.captioning import CaptionEvalSet, collate_eval
from vlattn.data.features.base import FeatureStore
from vlattn.data.karpathy import ImageEntry
from vlattn.data.vocab import Vocabulary
from vlattn.decoding import forced_decode
from vlattn.errors import ConfigError
from vlattn.precision import autocast
from vlattn.tasks.captioning import (
    check_beam_size,
    decode_rows,
    load_caption_data,
    load_decoder,
    resolve_beam_size,
    validation_choice,
)
from vlattn.tasks.inputs import reads_boxes, region_source
from vlattn.training.checkpoint import Checkpoint


@dataclass(frozen=True)
class Caption:
    """The caption of image ``image_id``: ``text``, its words ``tokens`` and their ids ``token_ids`` (EOS not
    included), ``score``: the sum of the log-probabilities of its words and EOS (under beam search divided by
    length^``length_penalty``, the beam's ranking score), and ``ended``: whether the decoder chose EOS (False: cut at
    ``max_len``, no EOS in the score)."""

    image_id: int
    text: str
    tokens: list[str]
    token_ids: list[int]
    score: float
    ended: bool = True


class Captioner:
    """A trained captioner. ``vocab`` maps words to ids (``bos_id``, ``eos_id``, ``pad_id`` are its special ids);
    ``beam_size``, ``max_len``, ``length_penalty`` and ``batch_size`` are the decoding defaults of the run's
    ``eval`` config (``eval.beam_size: auto``: the size recorded with the checkpoint, else chosen now on the config's
    val split) (attributes: change them to change the defaults); ``reads_boxes`` tells whether the model
    needs region boxes beside the features."""

    def __init__(self, model: nn.Module, config: Config, vocab: Vocabulary, device: torch.device) -> None:
        self.model, self.config, self.vocab, self.device = model, config, vocab, device
        self.bos_id, self.eos_id, self.pad_id = vocab.BOS, vocab.EOS, vocab.PAD
        self.beam_size, self.max_len = config.eval.beam_size, config.eval.max_len
        self.length_penalty, self.batch_size = config.eval.length_penalty, config.eval.batch_size
        self.reads_boxes = reads_boxes(config.model)

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, device: torch.device) -> Captioner:
        vocab = checkpoint.vocabulary("words", Vocabulary.load)
        model, cfg = load_decoder(checkpoint, vocab, None, device, None), checkpoint.config
        captioner = cls(model, cfg, vocab, device)
        captioner.beam_size, _ = resolve_beam_size(None, checkpoint, vocab, lambda: validation_choice(
            model, cfg, load_caption_data(cfg.data, vocab), device, source="at evaluation"))
        return captioner

    def caption(
        self,
        features: Any = None,
        *,
        boxes: Any = None,
        store: str | Path | FeatureStore | None = None,
        ids: Sequence[int] | None = None,
        beam_size: int | None = None,
        max_len: int | None = None,
        length_penalty: float | None = None,
    ) -> list[Caption]:
        """One :class:`Caption` per image, in the order of ``ids``.

        Either ``features``: one image's regions (N, D), a batch (B, N, D) or a list of (N_i, D) arrays or tensors,
        with ``boxes`` alike (N_i, 4: x1 y1 x2 y2 as fractions of the image's width and height; required when
        :attr:`reads_boxes`) and optional ``ids`` naming the images (default 0 .. B-1); or ``store``, a feature
        store (any layout vlattn reads, or an opened one) with the ``ids`` to caption (default: all). The first
        ``data.max_regions`` regions of each image are read, as in training.
        Decoding options default to the attributes of the same names; ``beam_size`` 1 is greedy decoding."""
        beam = check_beam_size(beam_size if beam_size is not None else self.beam_size, self.config, self.vocab,
                               explicit=beam_size is not None)
        length = max_len if max_len is not None else self.max_len
        if length < 1:
            raise ConfigError(f"max_len: must be >= 1, got {length}")
        rows = decode_rows(
            self.model, self._images(features, boxes, store, ids), self.vocab, beam_size=beam,
            max_len=length, length_penalty=self.length_penalty if length_penalty is None else length_penalty,
            batch_size=self.batch_size, device=self.device, precision=self.config.eval.precision,
            packed_output=self.config.eval.packed_output,
        )
        return [self._caption(image_id, tokens, score) for image_id, tokens, score in rows]

    def word_log_probs(
        self,
        captions: Sequence[Caption],
        features: Any = None,
        *,
        boxes: Any = None,
        store: str | Path | FeatureStore | None = None,
    ) -> list[list[float]]:
        """The log-probability of each word of each caption and of its EOS if it ``ended`` (``len(tokens) + ended``
        values), computed by stepping the model through the caption as decoding does
        (:func:`~vlattn.decoding.forced_decode`): the calls that produced a caption whichever decoder chose it
        (``vlattn explain`` records them). The regions are read as in :meth:`caption`, for the captions'
        ``image_id`` from ``store``, or given as ``features`` (one per caption, in order). Their sum is a greedy
        caption's ``score`` (a beam's at ``length_penalty`` 0), unless the decoder emitted PAD or BOS as words (an
        untrained model can), which ``token_ids`` leaves out."""
        ids = [caption.image_id for caption in captions]
        images = self._images(features, boxes, store, ids if features is None else None)
        if len(images) != len(captions):
            raise ConfigError(f"features: {len(images)} images for {len(captions)} captions")
        words = [[*caption.token_ids, *[self.eos_id] * caption.ended] for caption in captions]
        if not any(words):  # nothing to step through
            return [[] for _ in captions]
        tokens = torch.full((len(words), max(map(len, words))), self.pad_id, dtype=torch.long)
        for row, sequence in enumerate(words):
            tokens[row, : len(sequence)] = torch.tensor(sequence)
        inputs = collate_eval([images[i] for i in range(len(images))])
        inputs = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in inputs.items()}
        self.model.eval()
        with torch.no_grad(), autocast(self.config.eval.precision, self.device):
            forced = forced_decode(self.model, inputs, tokens.to(self.device), bos=self.bos_id, eos=self.eos_id,
                                   pad=self.pad_id)
        values = forced.log_probs[:, 0].float().cpu().tolist()
        return [row[: len(sequence)] for row, sequence in zip(values, words)]

    def _images(self, features: Any, boxes: Any, store: str | Path | FeatureStore | None,
                ids: Sequence[int] | None) -> CaptionEvalSet:
        """The images to decode, as an evaluation set (arguments: :meth:`caption`)."""
        source, wanted = region_source(self.config.model, features, boxes, store, ids)
        entries = [ImageEntry(image_id=i, split="test", filename="", captions=[], raw=[]) for i in wanted]
        return CaptionEvalSet(entries, source, self.config.data.max_regions)

    def _caption(self, image_id: int, tokens: list[int], score: float) -> Caption:
        ended = self.eos_id in tokens
        ids = tokens[: tokens.index(self.eos_id)] if ended else tokens
        ids = [i for i in ids if i not in (self.pad_id, self.bos_id)]
        words = [self.vocab.itos[i] for i in ids]
        return Caption(image_id=image_id, text=" ".join(words), tokens=words, token_ids=ids, score=score, ended=ended)
