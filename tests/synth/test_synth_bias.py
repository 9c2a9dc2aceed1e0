"""The bias metrics on the generator's own captions: the references are true statements of their scenes."""

from __future__ import annotations

from pathlib import Path

from vlattn.data.bias import bias_source
from vlattn.metrics.bias import bias_scores


def test_synthetic_references_are_never_biased(synth_dir: Path) -> None:
    """Every reference caption of the generator is true: no hallucinated object, every colour word right."""
    from vlattn.data.karpathy import load_karpathy

    references = {e.image_id: e.raw for e in load_karpathy(synth_dir / "dataset.json")}
    source = bias_source("auto", [], synth_dir, references)
    assert source.name == "synthetic"
    mentioned = attributes = 0
    for k in range(5):  # the k-th reference of every image (templates differ: counts, lists, relations, ...)
        report = bias_scores({i: refs[k] for i, refs in references.items()}, source.truth, source.lexicon)
        assert report.scores["CHAIR_s"] == 0.0 and report.scores["CHAIR_i"] == 0.0
        assert report.scores.get("A@Attr", 1.0) == 1.0
        mentioned, attributes = mentioned + report.counts["objects_mentioned"], attributes + report.counts["attributes"]
    assert mentioned > 100 and attributes > 100
    # and a captioner that calls every circle red is caught unless the circle is red
    wrong = {i: "a red circle" for i, t in source.truth.items() if "circle" in t.objects and ("red", "circle") not in t.pairs}
    assert wrong and bias_scores(wrong, source.truth, source.lexicon).scores["A@Attr"] == 0.0
