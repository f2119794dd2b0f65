"""A LeRobot dataset's metadata shaped as LeRobot's ``LeRobotDatasetMetadata``, for training code
moved over from LeRobot, and where LeRobot keeps datasets on this machine.

    ds = stoker.LeRobotDataset("lerobot/pusht")       # from $HF_LEROBOT_HOME/lerobot/pusht
    ds.meta.fps, ds.meta.camera_keys, ds.meta.stats["action"]["mean"], ds.meta.total_frames

Facts from LeRobot's ``lerobot.datasets`` (``utils.py``, ``lerobot_dataset.py``,
``compute_stats.py``): the local copy of ``repo_id`` is ``$HF_LEROBOT_HOME/<repo_id>``, with
``HF_LEROBOT_HOME`` defaulting to ``$HF_HOME/lerobot`` (``HF_HOME``:
``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``); ``features`` are info.json's
entries as dicts; ``camera_keys`` are the features of dtype ``video`` or ``image``; ``stats``
maps feature -> statistic -> numpy array, read from ``meta/stats.json`` (v3.0) or aggregated
from the per-episode statistics (v2.1's ``meta/episodes_stats.jsonl``; v3.0's ``stats/...``
columns when there is no stats.json): count-weighted means, pooled variances, min of minima,
max of maxima, summed counts.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from stoker._core import DatasetError
from stoker.datasets.lerobot import format as lerobot_format
from stoker.datasets.lerobot.metadata import LeRobotMetadata

__all__ = ["DatasetMeta", "EpisodeTable", "lerobot_home", "resolve_repo_id"]


def lerobot_home() -> str:
    """Where LeRobot keeps datasets: ``$HF_LEROBOT_HOME``, else ``$HF_HOME/lerobot``, else
    ``$XDG_CACHE_HOME/huggingface/lerobot``, else ``~/.cache/huggingface/lerobot``."""
    if os.environ.get("HF_LEROBOT_HOME"):
        return os.path.expanduser(os.environ["HF_LEROBOT_HOME"])
    hf_home = os.environ.get("HF_HOME")
    if not hf_home:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        hf_home = os.path.join(cache, "huggingface")
    return os.path.join(os.path.expanduser(hf_home), "lerobot")


def looks_like_repo_id(name: str) -> bool:
    """``owner/name``: two non-empty parts, not a path that starts at / or . or ~."""
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~")) and "\\" not in name


def resolve_repo_id(repo_id: str) -> str:
    """The local folder of ``repo_id`` in LeRobot's cache. Raises :class:`stoker.DatasetError`
    saying where it looked and how to fetch the dataset when it is not there (stoker does not
    download)."""
    folder = os.path.join(lerobot_home(), repo_id)
    if os.path.isfile(os.path.join(folder, lerobot_format.INFO_PATH)):
        return folder
    raise DatasetError(
        f"dataset {repo_id!r} is not on this machine: no {lerobot_format.INFO_PATH} in {folder} "
        "(LeRobot's cache, $HF_LEROBOT_HOME). stoker reads local copies and does not download; "
        f"fetch it with `huggingface-cli download {repo_id} --repo-type dataset --local-dir "
        f"{folder}` (or open it once with LeRobot's own LeRobotDataset({repo_id!r})), or pass "
        "root= the folder that holds it"
    )


class EpisodeTable:
    """The episodes of a dataset, columnar: ``table["dataset_from_index"]`` is a numpy array
    over episodes (as LeRobot v3.0's ``meta.episodes[column]``), ``table[e]`` a dict of
    episode e's values, ``len(table)`` the number of episodes. Columns: ``episode_index``,
    ``length``, ``dataset_from_index``, ``dataset_to_index`` (dataset rows, end exclusive),
    ``task_index`` (-1 without a task) and ``tasks`` (lists of texts)."""

    def __init__(self, columns: Mapping[str, Any]):
        self._columns = dict(columns)

    @property
    def column_names(self) -> list[str]:
        return list(self._columns)

    def __len__(self) -> int:
        return len(self._columns["episode_index"])

    def __getitem__(self, key: str | int) -> Any:
        if isinstance(key, str):
            if key not in self._columns:
                raise KeyError(f"no episode column {key!r}; the columns are {self.column_names}")
            return self._columns[key]
        e = int(key)
        if not -len(self) <= e < len(self):
            raise IndexError(f"episode {e} is out of range: the table has {len(self)}")
        return {name: _item(values[e]) for name, values in self._columns.items()}

    def __repr__(self) -> str:
        return f"EpisodeTable({len(self)} episodes, columns={self.column_names})"


def _item(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


class DatasetMeta:
    """What LeRobot's ``LeRobotDatasetMetadata`` offers that training code reads.

    ``repo_id``, ``root``, ``fps``, ``features`` (info.json's feature dicts: ``dtype``,
    ``shape``, ``names``, ``info``), ``camera_keys`` / ``video_keys`` / ``image_keys``,
    ``names`` and ``shapes`` per feature, ``stats`` (feature -> statistic -> numpy array; empty
    when the dataset has no statistics), ``episodes`` (an :class:`EpisodeTable`), ``tasks``
    (task_index -> text), ``total_frames``, ``total_episodes``, ``total_tasks``,
    ``codebase_version``, ``robot_type`` and ``info`` (the whole of info.json). These describe
    the whole dataset, also when a :class:`stoker.LeRobotDataset` reads only some episodes,
    as LeRobot's do.
    """

    def __init__(
        self,
        metadata: LeRobotMetadata,
        repo_id: str | None = None,
        stat_scales: Mapping[str, float] | None = None,
    ):
        self._metadata = metadata
        # Features whose statistics come out scaled (depth in the unit items give it in, as
        # LeRobot 0.6.1's rescale_depth_stats): feature -> factor, "count" left as it is.
        self._stat_scales = dict(stat_scales or {})
        self.repo_id = repo_id
        self.root = metadata.root
        self.info: dict[str, Any] = copy.deepcopy(metadata.info)
        self.features: dict[str, dict[str, Any]] = self.info["features"]
        self._stats: dict[str, dict[str, np.ndarray]] | None = None
        self._episodes: EpisodeTable | None = None

    @property
    def fps(self) -> float:
        fps = self._metadata.fps
        return int(fps) if float(fps).is_integer() else fps

    @property
    def codebase_version(self) -> str:
        return self._metadata.codebase_version

    @property
    def robot_type(self) -> str | None:
        return self.info.get("robot_type")

    @property
    def video_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if ft["dtype"] == "video"]

    @property
    def image_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if ft["dtype"] == "image"]

    @property
    def camera_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if ft["dtype"] in ("video", "image")]

    @property
    def names(self) -> dict[str, Any]:
        return {key: ft.get("names") for key, ft in self.features.items()}

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {key: tuple(ft["shape"]) for key, ft in self.features.items()}

    @property
    def total_frames(self) -> int:
        return self._metadata.num_frames

    @property
    def total_episodes(self) -> int:
        return self._metadata.num_episodes

    @property
    def tasks(self) -> dict[int, str]:
        return {t: str(text) for t, text in enumerate(self._metadata.tasks) if text != ""}

    @property
    def total_tasks(self) -> int:
        return len(self.tasks)

    @property
    def episodes(self) -> EpisodeTable:
        if self._episodes is None:
            m = self._metadata
            texts = m.tasks
            self._episodes = EpisodeTable(
                {
                    "episode_index": m.episode_index,
                    "length": m.length,
                    "dataset_from_index": m.dataset_from_index,
                    "dataset_to_index": m.dataset_to_index,
                    "task_index": m.task_index,
                    "tasks": [[str(texts[t])] if t >= 0 else [] for t in m.task_index.tolist()],
                }
            )
        return self._episodes

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """Read on first use (it may mean reading every episode's statistics)."""
        if self._stats is None:
            stats = read_dataset_stats(self._metadata)
            for feature, factor in self._stat_scales.items():
                if feature in stats:
                    stats[feature] = {
                        name: value if name == "count" else value * factor
                        for name, value in stats[feature].items()
                    }
            self._stats = stats
        return self._stats

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """info.json's ``tools`` (LeRobot 0.6's tool schemas for chat templates), or None."""
        tools = self.info.get("tools")
        return copy.deepcopy(tools) if tools is not None else None

    def __repr__(self) -> str:
        return (
            f"DatasetMeta(repo_id={self.repo_id!r}, root={self.root!r}, "
            f"{self.codebase_version}, {self.total_episodes} episodes, "
            f"{self.total_frames} frames at {self.fps} fps, cameras {self.camera_keys})"
        )


def read_dataset_stats(metadata: LeRobotMetadata) -> dict[str, dict[str, np.ndarray]]:
    """The dataset's statistics as LeRobot's metadata holds them (see the module's notes):
    v2.0 / v3.0 from ``meta/stats.json`` when it exists, v2.1 from its per-episode
    statistics when it has them; otherwise whichever of the two exists; ``{}`` without either.
    """
    source = metadata.source
    from_file = lerobot_format.read_stats(source)
    prefer_episodes = metadata.codebase_version == "v2.1" or from_file is None
    if prefer_episodes:
        episodes = lerobot_format.read_episode_table(source, metadata.codebase_version)
        per_episode = lerobot_format.read_episode_stats(source, episodes)
        if per_episode:
            ordered = [per_episode[e] for e in sorted(per_episode)]
            return _as_arrays(
                lerobot_format.aggregate_stats(ordered, set(metadata.features)),
                f"the per-episode statistics of {metadata.root}",
            )
    if from_file is None:
        return {}
    return _as_arrays(from_file, source.url(lerobot_format.STATS_PATH))


def _as_arrays(stats: Mapping[str, Any], where: str) -> dict[str, dict[str, np.ndarray]]:
    result: dict[str, dict[str, np.ndarray]] = {}
    for feature, values in stats.items():
        if not isinstance(values, Mapping):
            raise DatasetError(f"{where}: the statistics of {feature!r} are not an object")
        try:
            result[feature] = {name: np.asarray(value) for name, value in values.items()}
        except (TypeError, ValueError) as error:
            raise DatasetError(f"{where}: statistics of {feature!r}: {error}") from None
    return result
