"""stoker: a data-loading engine for multimodal ML training, so the GPU never waits for data.

Start with :class:`LeRobotDataset` and :class:`WindowSpec` for temporal windows of LeRobot
datasets and :class:`Loader` to batch them on native threads into zero-copy tensors,
:class:`VideoReader` for frame-exact random access to a video file (local, or in S3 / behind
HTTPS with :class:`S3Options`), and the samplers
(:class:`RandomSampler`, :class:`DistributedSampler`, :class:`WeightedSampler`,
:class:`LoadBalancedSampler`, ...) for deterministic, resumable sample orders.
:class:`ShardDataset` reads images, clips, text and labels from tar shards (WebDataset's
layout) for the same :class:`Loader`; :func:`write_shards` (``stoker shard``) writes them.

The package, one concept per folder: ``loader``, ``sampling`` and ``transforms`` at the top;
``datasets/`` (``lerobot/``, ``shards``, ``mix``), ``io/`` (storage, video, image),
``writers/`` (``stoker etl``, ``stoker shard``, clips, typed columns), ``integrations/``
(``ray``, ``torchdata``: also ``stoker.ray`` and ``stoker.torchdata``), ``doctor/`` and
``checks/`` (``stoker.check``). Every public name is re-exported here; a public name that moves
keeps its old name as an alias that warns (``stoker.adapters``, ``stoker.etl``).
"""

from stoker._core import (
    AccessDeniedError,
    DatasetError,
    DecodeError,
    Error,
    InternalError,
    InvalidArgumentError,
    ResourceError,
    usable_cores,
)
from stoker.checks import CheckReport, Finding, check
from stoker.datasets.lerobot.dataset import ItemKey, LeRobotDataset, WindowSpec
from stoker.datasets.lerobot.index import EpisodeIndex, IndexReport, load_index
from stoker.datasets.mix import MultiDataset
from stoker.datasets.shards import (
    Array,
    Clip,
    Image,
    Json,
    Label,
    ShardDataset,
    ShardSpec,
    Text,
    Tokens,
)
from stoker.doctor import Diagnosis, diagnose, profile, synthetic_step
from stoker.io.image import decode_image, decode_images, probe_image
from stoker.io.storage import S3Options
from stoker.io.video import VideoReader
from stoker.loader import Loader, LoaderObserver
from stoker.sampling import (
    DistributedSampler,
    EpisodeAwareSampler,
    LoadBalancedSampler,
    MixSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    WeightedSampler,
    expand_group_weights,
)
from stoker.transforms import Transforms
from stoker.version import __version__
from stoker.writers.shards import write_shards

# The exceptions are made by the native module; they are public here, and named so in
# tracebacks, reprs and pickles (`stoker.DatasetError`, not `stoker._core.DatasetError`).
for _error in (Error, *Error.__subclasses__()):
    _error.__module__ = __name__
del _error

__all__ = [
    "AccessDeniedError",
    "Array",
    "CheckReport",
    "Clip",
    "DatasetError",
    "DecodeError",
    "Diagnosis",
    "DistributedSampler",
    "EpisodeAwareSampler",
    "EpisodeIndex",
    "Error",
    "Finding",
    "Image",
    "IndexReport",
    "InternalError",
    "InvalidArgumentError",
    "ItemKey",
    "Json",
    "Label",
    "LeRobotDataset",
    "LoadBalancedSampler",
    "MixSampler",
    "Loader",
    "LoaderObserver",
    "MultiDataset",
    "RandomSampler",
    "ResourceError",
    "S3Options",
    "Sampler",
    "SequentialSampler",
    "ShardDataset",
    "ShardSpec",
    "Text",
    "Tokens",
    "Transforms",
    "VideoReader",
    "WeightedSampler",
    "WindowSpec",
    "check",
    "decode_image",
    "decode_images",
    "diagnose",
    "expand_group_weights",
    "load_index",
    "probe_image",
    "profile",
    "synthetic_step",
    "usable_cores",
    "write_shards",
    "__version__",
]
