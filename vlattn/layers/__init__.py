"""Building blocks shared by the model stacks: feed-forward (registry, plain and group-wise), group-wise linear
layers, positions, residual + LayerNorm, box geometry."""

from vlattn.layers.feedforward import FEED_FORWARD, FeedForward, GroupFeedForward, build_feed_forward
from vlattn.layers.geometry import BoxGeometry
from vlattn.layers.grouped import GroupedLinear
from vlattn.layers.positional import PositionTable, SinusoidalPositions, sinusoidal_positions
from vlattn.layers.sublayer import DoublePostNorm, PostNorm, StdLayerNorm

__all__ = [
    "FEED_FORWARD",
    "BoxGeometry",
    "DoublePostNorm",
    "FeedForward",
    "GroupFeedForward",
    "GroupedLinear",
    "PositionTable",
    "PostNorm",
    "SinusoidalPositions",
    "StdLayerNorm",
    "build_feed_forward",
    "sinusoidal_positions",
]
