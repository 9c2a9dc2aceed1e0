"""Scoring prediction files without a model: ``vlattn score`` for COCO captions and VQA.

:mod:`.captions` scores a COCO results file as pycocoevalcap's COCOEvalCap does; :mod:`.vqa` scores a VQA
results file with the official accuracy of :mod:`vlattn.metrics.vqa`; :mod:`.cli` is the command.
"""

from vlattn.scoring.captions import CaptionScore, load_caption_references, load_caption_results, score_caption_files
from vlattn.scoring.vqa import VQAScore, load_vqa_results, score_vqa_files, write_vqa_results

__all__ = [
    "CaptionScore", "VQAScore", "load_caption_references", "load_caption_results", "load_vqa_results",
    "score_caption_files", "score_vqa_files", "write_vqa_results",
]
