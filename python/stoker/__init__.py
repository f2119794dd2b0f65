"""stoker: a data-loading engine for multimodal ML training, so the GPU never waits for data.

Start with :class:`VideoReader` for frame-exact random access to a video file, and the
samplers (:class:`RandomSampler`, :class:`DistributedSampler`, :class:`WeightedSampler`,
:class:`LoadBalancedSampler`, ...) for deterministic, resumable sample orders.
"""

from stoker._core import DatasetError, DecodeError, Error
from stoker.sampling import (DistributedSampler, LoadBalancedSampler, RandomSampler, Sampler,
                             SequentialSampler, WeightedSampler, expand_group_weights)
from stoker.video import VideoReader

__all__ = ["DatasetError", "DecodeError", "DistributedSampler", "Error", "LoadBalancedSampler", "RandomSampler",
           "Sampler", "SequentialSampler", "VideoReader", "WeightedSampler",
           "expand_group_weights"]
__version__ = "0.1.0"
