"""Pictures of what a model does: attention weights captured during decoding (:mod:`vlattn.viz.capture`)."""

from vlattn.viz.capture import AttentionRecorder, Call

__all__ = ["AttentionRecorder", "Call"]
