"""Writers of tiny but real LeRobot datasets (v2.1 and v3.0) for the tests.

v3.0 datasets are written with stoker's own writer (:mod:`stoker.datasets.lerobot.format`, which
``stoker etl`` uses); stoker writes no v2.1, so v2.1 sources are written here, at the paths
:mod:`stoker.datasets.lerobot.format` reads. Videos are encoded with the ffmpeg program using LeRobot's
settings (libsvtav1, g=2, crf 30, yuv420p, or libx264 with the same g / crf), with a fast preset
and tiny frames.

Everything a test may want to check is encoded in the data:

* Row values: ``observation.state[j] = episode * 1000 + frame + j / 8`` and
  ``action[j] = -(episode * 1000 + frame) - j / 8`` (exact in float32), see
  :func:`state_values` / :func:`action_values`.
* Pixels: each frame is gray and split into 6 vertical stripes whose brightness levels are the
  base-8 digits of ``episode * 512 + frame`` (``frame`` counts within the episode; with
  ``mark_episodes=False`` the episode part is 0). :func:`read_marks` turns decoded RGB frames
  back into (episode, frame).

v3.0 video files are packed the way LeRobot packs them: each episode is encoded on its own,
then the episodes are joined with FFmpeg's concat demuxer by stream copy, and
``videos/<camera>/from_timestamp`` is the running sum of the episodes' durations
(length / fps). That sum drifts from the real pts of the joined file (see
``shared/PEERS.md``).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stoker.datasets.lerobot import format as lerobot_format

DEFAULT_CAMERA = "observation.images.top"
TASKS = ("pick up the cube", "push the cube to the left")

# Digits of the pixel mark: stripe k shows digit k of a 6-digit base-8 number.
_MARK_DIGITS = 6
_MARK_BASE = 8
_MARK_STEP = 32  # brightness per digit step: levels 16, 48, ..., 240

_ENCODERS = {
    "av1": ["-c:v", "libsvtav1", "-preset", "12", "-g", "2", "-crf", "30", "-pix_fmt", "yuv420p"],
    "h264": ["-c:v", "libx264", "-preset", "veryfast", "-g", "2", "-crf", "30",
             "-pix_fmt", "yuv420p"],
}


@dataclass
class WrittenDataset:
    """What a writer produced, for the tests to compare with what stoker reads."""

    root: str
    version: str
    lengths: List[int]
    fps: int
    cameras: List[str]
    tasks: List[str]
    episode_task: List[int]
    # camera -> per episode: absolute video path and from_timestamp as written to the metadata.
    video_paths: Dict[str, List[str]] = field(default_factory=dict)
    from_timestamp: Dict[str, np.ndarray] = field(default_factory=dict)
    data_paths: List[str] = field(default_factory=list)  # per episode


def state_values(episode, frame, dim: int = 6) -> np.ndarray:
    """observation.state of (episode, frame) rows: float32 [..., dim]."""
    base = np.asarray(episode, np.float64) * 1000 + np.asarray(frame, np.float64)
    return (base[..., None] + np.arange(dim) / 8).astype(np.float32)


def action_values(episode, frame, dim: int = 6) -> np.ndarray:
    """action of (episode, frame) rows: float32 [..., dim]."""
    return -state_values(episode, frame, dim)


def read_marks(frames: np.ndarray, layout: str = "NHWC") -> Tuple[np.ndarray, np.ndarray]:
    """(episode, frame) int arrays [N] read from the stripes of decoded RGB frames: uint8, or
    floats in [0, 1] (stoker's and LeRobot's default)."""
    frames = np.asarray(frames)
    if frames.dtype.kind == "f":
        frames = np.rint(frames.astype(np.float64) * 255)
    if layout == "NCHW":
        frames = frames.transpose(0, 2, 3, 1)
    n, height, width, _ = frames.shape
    centres = ((np.arange(_MARK_DIGITS) + 0.5) * width / _MARK_DIGITS).astype(int)
    rows = slice(height // 4, height - height // 4)
    levels = frames[:, rows][:, :, centres].astype(np.float64).mean(axis=(1, 3))  # [N, digits]
    digits = np.clip(np.rint((levels - 16) / _MARK_STEP), 0, _MARK_BASE - 1).astype(np.int64)
    value = np.zeros(n, np.int64)
    for k in range(_MARK_DIGITS):
        value = value * _MARK_BASE + digits[:, k]
    return value // 512, value % 512


# ---------------------------------------------------------------------------------------------
# Writers


def write_v21(root, episodes: Sequence[int], cameras: Sequence[str] = (DEFAULT_CAMERA,),
              fps: int = 30, codec: str = "av1", size: Tuple[int, int] = (64, 64), *,
              state_dim: int = 6, action_dim: int = 6, chunks_size: int = 1000,
              list_type: str = "fixed", mark_episodes: bool = True,
              cache_dir: Optional[str] = None) -> WrittenDataset:
    """Writes a LeRobot v2.1 dataset of episodes of the given lengths into folder ``root``.

    One Parquet file per episode, one MP4 per camera per episode, at LeRobot's default path
    templates with ``episode_chunk = episode_index // chunks_size``. ``size`` is (height,
    width); AV1 (SVT-AV1) needs both at least 64. ``list_type`` is "fixed" (Arrow
    fixed_size_list, as HF datasets writes ``Sequence(length=n)``) or "list". ``cache_dir``
    keeps encoded episodes for reuse across datasets (default: a fresh temporary folder).
    """
    root = os.path.abspath(os.fspath(root))
    lengths = [int(n) for n in episodes]
    tasks, episode_task = _tasks_for(len(lengths))
    written = WrittenDataset(root, "v2.1", lengths, fps, list(cameras), list(tasks),
                             episode_task)
    data_template, video_template = lerobot_format.V21_DATA_PATH, lerobot_format.V21_VIDEO_PATH

    start = 0
    for e, n in enumerate(lengths):
        path = os.path.join(root, data_template.format(episode_chunk=e // chunks_size,
                                                       episode_index=e))
        rows = _rows([e], [n], start, fps, episode_task, state_dim, action_dim, list_type)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(rows, path)
        written.data_paths.append(path)
        start += n

    encoded = _encode_episodes(lengths, fps, codec, size, mark_episodes, cache_dir)
    for camera in cameras:
        paths = []
        for e in range(len(lengths)):
            path = os.path.join(root, video_template.format(
                episode_chunk=e // chunks_size, video_key=camera, episode_index=e))
            _link(encoded[e], path)
            paths.append(path)
        written.video_paths[camera] = paths
        written.from_timestamp[camera] = np.zeros(len(lengths))

    _write_jsonl(os.path.join(root, lerobot_format.V21_EPISODES_PATH), [
        {"episode_index": e, "tasks": [tasks[episode_task[e]]], "length": n}
        for e, n in enumerate(lengths)])
    _write_jsonl(os.path.join(root, lerobot_format.V21_TASKS_PATH),
                 [{"task_index": t, "task": text} for t, text in enumerate(tasks)])
    info = {
        "codebase_version": "v2.1", "robot_type": "stoker_test",
        "total_episodes": len(lengths), "total_frames": int(sum(lengths)),
        "total_tasks": len(tasks), "total_videos": len(lengths) * len(cameras),
        "total_chunks": (len(lengths) - 1) // chunks_size + 1 if lengths else 0,
        "chunks_size": chunks_size, "fps": fps, "splits": {"train": f"0:{len(lengths)}"},
        "data_path": data_template, "video_path": video_template if cameras else None,
        "features": _features(cameras, fps, codec, size, state_dim, action_dim),
    }
    lerobot_format.write_info(root, info)
    return written


def write_v30(root, episodes: Sequence[int], cameras: Sequence[str] = (DEFAULT_CAMERA,),
              fps: int = 30, codec: str = "av1", size: Tuple[int, int] = (64, 64), *,
              episodes_per_file: int = 2,
              video_episodes_per_file: Optional[Dict[str, int]] = None,
              state_dim: int = 6, action_dim: int = 6, chunks_size: int = 1000,
              list_type: str = "fixed", mark_episodes: bool = True,
              offsets: str = "nominal", cache_dir: Optional[str] = None,
              progress: Optional[Callable[[int, int], None]] = None,
              content: str = "marks") -> WrittenDataset:
    """Writes a LeRobot v3.0 dataset of episodes of the given lengths into folder ``root``.

    Data files, episode-table files and each camera's video files hold ``episodes_per_file``
    episodes each (a camera listed in ``video_episodes_per_file`` uses its own count, so its
    offsets differ from the other cameras'). File n of a kind is ``chunk-{n // chunks_size}/
    file-{n % chunks_size}``. Videos are packed by stream-copy concatenation of per-episode
    encodes; ``from_timestamp`` is the running sum, within each file, of the episodes'
    durations: length / fps with ``offsets="nominal"``, or with ``offsets="probed"`` the
    container duration ffprobe reports for each episode's encode (``format=duration``), which
    is what LeRobot's own recorder and v2.1 -> v3.0 converter sum. With
    ``mark_episodes=False`` every episode of one length shares one encode, which makes packing
    hundreds of episodes cheap. ``progress(done, total)`` is called as episodes are encoded.
    ``content="camera"`` encodes a moving test pattern with grain instead of the marks: it
    compresses and decodes like camera footage (for demos and benchmarks; no marks to read).
    Other arguments as in :func:`write_v21`.
    """
    root = os.path.abspath(os.fspath(root))
    lengths = [int(n) for n in episodes]
    tasks, episode_task = _tasks_for(len(lengths))
    written = WrittenDataset(root, "v3.0", lengths, fps, list(cameras), list(tasks),
                             episode_task)

    data_file = _file_numbers(len(lengths), episodes_per_file)
    rows = _rows(range(len(lengths)), lengths, 0, fps, episode_task, state_dim, action_dim,
                 list_type)
    paths = lerobot_format.write_data(root, rows, lengths, data_file, chunks_size)
    written.data_paths = [paths[n] for n in data_file]

    encoded = _encode_episodes(lengths, fps, codec, size, mark_episodes, cache_dir, progress,
                               content)
    if offsets == "nominal":
        durations = [n / fps for n in lengths]
    elif offsets == "probed":
        probed = {path: probe_duration(path) for path in set(encoded)}
        durations = [probed[path] for path in encoded]
    else:
        raise ValueError(f'offsets must be "nominal" or "probed", got {offsets!r}')
    videos = {}
    for camera in cameras:
        file = _file_numbers(len(lengths),
                             (video_episodes_per_file or {}).get(camera, episodes_per_file))
        from_timestamp, to_timestamp = np.zeros(len(lengths)), np.zeros(len(lengths))
        for number in np.unique(file):
            group = np.flatnonzero(file == number)
            _concat([encoded[e] for e in group],
                    lerobot_format.file_path(root, lerobot_format.VIDEO_PATH, int(number),
                                             chunks_size, video_key=camera))
            duration = 0.0  # the running sum of the file's episodes' durations
            for e in group:
                from_timestamp[e] = duration
                duration += durations[e]
                to_timestamp[e] = duration
        videos[camera] = lerobot_format.EpisodeVideos(file, from_timestamp, to_timestamp)
        written.video_paths[camera] = [
            lerobot_format.file_path(root, lerobot_format.VIDEO_PATH, n, chunks_size,
                                     video_key=camera) for n in file]
        written.from_timestamp[camera] = from_timestamp

    columns = lerobot_format.episode_columns(lengths, [[tasks[t]] for t in episode_task],
                                             data_file, videos, chunks_size)
    lerobot_format.write_episodes(root, columns, chunks_size, file_of_episode=data_file)
    lerobot_format.write_tasks(root, tasks)
    lerobot_format.write_info(root, lerobot_format.v30_info(
        {"robot_type": "stoker_test", "fps": fps},
        features=_features(cameras, fps, codec, size, state_dim, action_dim),
        num_episodes=len(lengths), num_frames=int(sum(lengths)), num_tasks=len(tasks),
        chunks_size=chunks_size, has_videos=bool(cameras)))
    return written


# ---------------------------------------------------------------------------------------------
# Pieces


def _tasks_for(num_episodes: int) -> Tuple[List[str], List[int]]:
    """Episodes alternate between the two tasks (one task when there is one episode)."""
    count = min(len(TASKS), max(num_episodes, 1))
    return list(TASKS[:count]), [e % count for e in range(num_episodes)]


def _file_numbers(count: int, per_file: int) -> np.ndarray:
    """The file of each of ``count`` episodes when files hold ``per_file`` episodes each."""
    if per_file < 1:
        raise ValueError(f"episodes per file must be positive, got {per_file}")
    return np.arange(count, dtype=np.int64) // per_file


def _rows(episodes, lengths, start, fps, episode_task, state_dim, action_dim,
          list_type) -> pa.Table:
    """The data rows of ``episodes`` back to back, numbered from ``start``."""
    episode = np.repeat(np.asarray(episodes, np.int64), lengths)
    frame = np.concatenate([np.arange(n, dtype=np.int64) for n in lengths]) if lengths else \
        np.zeros(0, np.int64)
    rows = len(frame)

    def vectors(values):
        flat = pa.array(values.reshape(-1), pa.float32())
        if list_type == "fixed":
            return pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
        offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * values.shape[1])
        return pa.ListArray.from_arrays(offsets, flat)

    return pa.table({
        "observation.state": vectors(state_values(episode, frame, state_dim)),
        "action": vectors(action_values(episode, frame, action_dim)),
        "timestamp": pa.array((frame / fps).astype(np.float32)),
        "frame_index": pa.array(frame),
        "episode_index": pa.array(episode),
        "index": pa.array(start + np.arange(rows, dtype=np.int64)),
        "task_index": pa.array(np.asarray(episode_task, np.int64)[episode]
                               if rows else np.zeros(0, np.int64)),
    })


def _features(cameras, fps, codec, size, state_dim, action_dim) -> dict:
    """info.json's features: state and action vectors, the cameras, LeRobot's default columns."""
    height, width = size
    features = {
        "observation.state": {"dtype": "float32", "shape": [state_dim],
                              "names": [f"joint_{j}" for j in range(state_dim)]},
        "action": {"dtype": "float32", "shape": [action_dim],
                   "names": [f"joint_{j}" for j in range(action_dim)]},
    }
    for camera in cameras:
        features[camera] = lerobot_format.video_feature(
            {"dtype": "video", "info": {"video.fps": fps}}, height, width, codec)
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for name in ("frame_index", "episode_index", "index", "task_index"):
        features[name] = {"dtype": "int64", "shape": [1], "names": None}
    return features


def _write_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)


def _link(source, target):
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


# ---------------------------------------------------------------------------------------------
# Video


def _mark_expression(episode: Optional[int]) -> str:
    value = f"({episode}*512+N)" if episode is not None else "N"
    digit = (f"mod(floor({value}/pow({_MARK_BASE}\\,{_MARK_DIGITS - 1}-floor(X*{_MARK_DIGITS}/W)))"
             f"\\,{_MARK_BASE})")
    return f"16+{_MARK_STEP}*{digit}"


def encode_episode(path: str, length: int, fps: int, codec: str = "av1",
                   size: Tuple[int, int] = (64, 64), episode: Optional[int] = 0,
                   content: str = "marks") -> None:
    """Encodes one episode of ``length`` frames with LeRobot's settings to ``path``: marked
    frames, or with ``content="camera"`` a moving test pattern with grain (tinted per
    episode)."""
    if codec not in _ENCODERS:
        raise ValueError(f"codec must be one of {sorted(_ENCODERS)}, got {codec!r}")
    height, width = size
    if codec == "av1" and min(height, width) < 64:
        raise ValueError(f"SVT-AV1 needs frames of at least 64x64, got {size}")
    if length < 1:
        raise ValueError("an encoded episode needs at least one frame")
    if content == "camera":
        source = (f"testsrc2=size={width}x{height}:rate={fps},"
                  f"hue=h={37 * (episode or 0)},noise=alls=10:allf=t")
    elif content == "marks":
        mark = _mark_expression(episode)
        source = (f"color=c=black:s={width}x{height}:r={fps},format=rgb24,"
                  f"geq=r='{mark}':g='{mark}':b='{mark}'")
    else:
        raise ValueError(f'content must be "marks" or "camera", got {content!r}')
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _ffmpeg(["-f", "lavfi", "-i", source, "-frames:v", str(length), *_ENCODERS[codec],
             "-r", str(fps), path])


def _encode_episodes(lengths, fps, codec, size, mark_episodes, cache_dir,
                     progress=None, content="marks") -> List[str]:
    """Path of each episode's encode, made (in parallel) unless ``cache_dir`` has it."""
    if cache_dir is None:
        cache_dir = tempfile.mkdtemp(prefix="stoker-lerobot-")
    os.makedirs(cache_dir, exist_ok=True)
    height, width = size
    paths, jobs = [], {}
    for e, n in enumerate(lengths):
        episode = e if mark_episodes else None
        name = f"{codec}_{fps}fps_{width}x{height}_n{n}_e{'x' if episode is None else episode}.mp4"
        if content != "marks":
            name = f"{content}_{name}"
        path = os.path.join(cache_dir, name)
        paths.append(path)
        if not os.path.exists(path) and path not in jobs:
            jobs[path] = (n, episode)

    def run(item):
        path, (n, episode) = item
        partial = path + ".part.mp4"
        encode_episode(partial, n, fps, codec, size, episode, content)
        os.replace(partial, path)

    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        for done, _ in enumerate(pool.map(run, jobs.items()), 1):
            if progress is not None:
                progress(done, len(jobs))
    return paths


def _concat(sources: Sequence[str], target: str) -> None:
    """Joins episode videos into ``target`` with the concat demuxer, by stream copy."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
        listing.writelines(f"file '{os.path.abspath(s)}'\n" for s in sources)
    try:
        _ffmpeg(["-f", "concat", "-safe", "0", "-i", listing.name, "-c", "copy", target])
    finally:
        os.unlink(listing.name)


def probe_duration(path: str) -> float:
    """The container duration ffprobe reports (``format=duration``), in seconds."""
    result = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=duration",
                             "-of", "default=noprint_wrappers=1:nokey=1", path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    return float(result.stdout)


def _ffmpeg(arguments: Sequence[str]) -> None:
    result = subprocess.run(["ffmpeg", "-nostdin", "-y", "-loglevel", "error", *arguments],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"ffmpeg failed ({result.returncode}): {' '.join(arguments)}\n"
                           f"{result.stderr[-2000:]}")


# ---------------------------------------------------------------------------------------------
# Columns of JSON text (structured ground truth stored as strings, e.g. per-frame annotations)


def annotation(episode: int, frame: int) -> dict:
    """A per-frame annotation of (episode, frame), with every JSON shape ``stoker etl`` types:
    numbers, booleans, strings, fixed-length and variable-length lists, nested objects and a list
    of objects."""
    return {
        "score": episode + frame / 8,  # float
        "count": frame,  # int
        "visible": frame % 2 == 0,  # bool
        "label": f"cube-{episode}",  # string
        "box": [frame, episode, frame + 4, episode + 4],  # 4 ints
        "corners": [[frame / 2, 1.0], [2.0, episode / 4]],  # 2 x 2 floats
        "track": list(range(frame % 3)),  # 0-2 ints
        "pose": {"x": float(frame), "y": -float(episode)},  # nested object
        "objects": [{"name": f"obj{j}", "xy": [frame, j]} for j in range(1 + frame % 2)],
    }


def add_json_column(written: WrittenDataset, name: str = "annotation", value=annotation) -> None:
    """Adds a string column ``name`` holding ``json.dumps(value(episode, frame))`` to every data
    file of ``written`` (and a string feature to its info.json), as datasets that store
    structured ground truth as JSON text have it."""
    for path in sorted(set(written.data_paths)):
        table = pq.read_table(path)
        episodes = table.column("episode_index").to_pylist()
        frames = table.column("frame_index").to_pylist()
        texts = [json.dumps(value(e, f)) for e, f in zip(episodes, frames)]
        pq.write_table(table.append_column(name, pa.array(texts, pa.string())), path)
    info_path = os.path.join(written.root, "meta", "info.json")
    with open(info_path, encoding="utf-8") as f:
        info = json.load(f)
    info["features"][name] = {"dtype": "string", "shape": [1], "names": None}
    lerobot_format.write_info(written.root, info)


def corrupt_media_data(path: str) -> None:
    """Overwrites the payload of an MP4's media data box with seeded noise: sizes, headers and
    the sample index stay intact, so the file still opens and indexes, but does not decode. The
    file is replaced (not written through), since dataset videos may be links into a shared
    encode cache."""
    import struct

    with open(path, "rb") as f:
        data = bytearray(f.read())
    at = 0
    while at + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"mdat":
            noise = np.random.default_rng(0).integers(0, 256, size - 8, dtype=np.uint8)
            data[at + 8:at + size] = noise.tobytes()
            break
        at += size
    else:
        raise ValueError(f"no mdat box in {path}")
    os.unlink(path)
    with open(path, "wb") as f:
        f.write(bytes(data))


# ---------------------------------------------------------------------------------------------
# Image features (LeRobot "dtype": "image": PNG / JPEG bytes in the data files)


def image_pixels(episode: int, frame: int, size: Tuple[int, int] = (40, 48)) -> np.ndarray:
    """The RGB pixels (uint8 [H, W, 3]) of the image feature at (episode, frame): seeded noise,
    so that any misplaced row or pixel shows."""
    rng = np.random.default_rng(episode * 100_003 + frame)
    return rng.integers(0, 256, (*size, 3), dtype=np.uint8)


def add_image_camera(written: WrittenDataset, name: str = "observation.images.wrist",
                     size: Tuple[int, int] = (40, 48), image_format: str = "PNG") -> None:
    """Adds image feature ``name`` to every data file of ``written`` as LeRobot stores it: a
    ``{bytes, path}`` struct column of encoded images (``image_format`` "PNG" or "JPEG", made
    with Pillow from :func:`image_pixels`), and ``"dtype": "image"`` in info.json."""
    import io

    from PIL import Image

    for path in sorted(set(written.data_paths)):
        table = pq.read_table(path)
        episodes = table.column("episode_index").to_pylist()
        frames = table.column("frame_index").to_pylist()
        encoded = []
        for e, f in zip(episodes, frames):
            buffer = io.BytesIO()
            Image.fromarray(image_pixels(e, f, size)).save(buffer, format=image_format)
            encoded.append({"bytes": buffer.getvalue(), "path": f"frame_{e}_{f}.png"})
        column = pa.array(encoded, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
        pq.write_table(table.append_column(name, column), path)
    info_path = os.path.join(written.root, "meta", "info.json")
    with open(info_path, encoding="utf-8") as f:
        info = json.load(f)
    info["features"][name] = {"dtype": "image", "shape": [size[0], size[1], 3],
                              "names": ["height", "width", "channels"]}
    lerobot_format.write_info(written.root, info)
    written.cameras.append(name)


# ---------------------------------------------------------------------------------------------
# Depth cameras (single-channel high-bit-depth video, "video.is_depth_map": true)


def depth_values(episode: int, frame: int, size: Tuple[int, int] = (24, 32),
                 bits: int = 16) -> np.ndarray:
    """The stored samples (uint16 [H, W]) of the depth camera at (episode, frame): a ramp that
    differs per pixel, frame and episode and spans the ``bits``-bit range."""
    height, width = size
    y, x = np.mgrid[0:height, 0:width]
    value = episode * 7919 + frame * 1031 + y * 2053 + x * 397 + (x * y) % 13
    return (value % (1 << bits)).astype(np.uint16)


#: The info attributes LeRobot 0.6.1's recorder gives a depth camera (its DepthEncoderConfig
#: defaults: log quantizer, 0.01 to 10 m, shift 3.5), for :func:`add_depth_camera`.
LEROBOT_06_DEPTH_INFO = {"is_depth_map": True, "depth_unit": "m", "video.depth_min": 0.01,
                         "video.depth_max": 10.0, "video.shift": 3.5, "video.use_log": True,
                         "video.g": 2, "video.crf": 30, "video.preset": None,
                         "video.fast_decode": 0, "video.video_backend": "pyav",
                         "video.extra_options": {"x265-params": "lossless=1"}}


def add_depth_camera(written: WrittenDataset, name: str = "observation.images.depth",
                     size: Tuple[int, int] = (24, 32), pix_fmt: str = "gray16le",
                     depth_info: Optional[dict] = None, codec: str = "ffv1") -> None:
    """Adds video feature ``name``, a depth map, laid out in files as :data:`DEFAULT_CAMERA`
    (one file per episode in v2.1; the same packing in v3.0): :func:`depth_values` of every
    frame, encoded losslessly with ``codec``: FFV1 (``pix_fmt`` gray16le, gray12le or
    gray10le; stored in a MOV container under LeRobot's file names, as MP4 cannot hold FFV1) or
    HEVC (``"hevc"``: libx265 lossless in MP4, as LeRobot 0.6 writes depth), and its info.json
    feature with ``"video.is_depth_map": true`` plus ``depth_info`` (e.g.
    ``{"video.depth_scale": 0.001}``, or :data:`LEROBOT_06_DEPTH_INFO`)."""
    bits = {"gray16le": 16, "gray12le": 12, "gray10le": 10}[pix_fmt]
    encoder = (["-c:v", "libx265", "-x265-params", "lossless=1:log-level=error", "-g", "2",
                "-f", "mp4"] if codec == "hevc" else ["-c:v", "ffv1", "-g", "5", "-f", "mov"])
    height, width = size
    first = written.cameras[0]
    files: Dict[str, List[int]] = {}
    for e, path in enumerate(written.video_paths[first]):
        files.setdefault(path, []).append(e)
    paths = []
    for source, episodes in files.items():
        target = source.replace(first, name)
        frames = [depth_values(e, f, size, bits) for e in episodes
                  for f in range(written.lengths[e])]
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # Raw samples in the target format (no conversion: gray12le raw is uint16 below 4096).
        result = subprocess.run(
            ["ffmpeg", "-nostdin", "-y", "-loglevel", "error", "-f", "rawvideo",
             "-pix_fmt", pix_fmt, "-s", f"{width}x{height}", "-r", str(written.fps), "-i", "-",
             "-pix_fmt", pix_fmt, *encoder, target],
            input=np.stack(frames).astype("<u2").tobytes(), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        if result.returncode != 0:
            raise RuntimeError(f"ffmpeg failed: {result.stderr.decode()[-2000:]}")
        paths.append(target)
    written.video_paths[name] = [p.replace(first, name) for p in written.video_paths[first]]
    written.from_timestamp[name] = written.from_timestamp[first].copy()
    if written.version == "v3.0":
        episodes_dir = os.path.join(written.root, "meta", "episodes")
        for folder, _, names in os.walk(episodes_dir):
            for file_name in names:
                path = os.path.join(folder, file_name)
                table = pq.read_table(path)
                for column in list(table.column_names):
                    prefix = f"videos/{first}/"
                    if column.startswith(prefix):
                        table = table.append_column(
                            f"videos/{name}/{column[len(prefix):]}", table.column(column))
                pq.write_table(table, path)
    info_path = os.path.join(written.root, "meta", "info.json")
    with open(info_path, encoding="utf-8") as f:
        info = json.load(f)
    feature = json.loads(json.dumps(info["features"][first]))
    feature["shape"] = [height, width, 1]
    depth_info = depth_info or {}
    # LeRobot 0.6 marks depth "is_depth_map" (it migrates the earlier "video.is_depth_map").
    feature["info"].pop("video.is_depth_map", None)
    feature["info"].update({"video.height": height, "video.width": width, "video.codec": codec,
                            "video.pix_fmt": pix_fmt, "video.channels": 1,
                            **({} if "is_depth_map" in depth_info else
                               {"video.is_depth_map": True}), **depth_info})
    info["features"][name] = feature
    if "total_videos" in info:
        info["total_videos"] += len(paths)
    lerobot_format.write_info(written.root, info)
    written.cameras.append(name)


# Joint angles, in degrees, of the arm :func:`record_with_lerobot` records: where each joint
# swings about, how far, and (the wrist roll) one that barely moves, a servo's jitter of
# 0.01 degree about 90: its statistics are where LeRobot's float32 arithmetic rounds most.
_JOINT_CENTRES = np.array([0.0, 45.0, -30.0, 60.0, 90.0, 20.0])
_JOINT_SWINGS = np.array([25.0, 15.0, 20.0, 10.0, 0.0, 30.0])
STILL_JOINT = 4


def record_with_lerobot(root, episodes: Sequence[int], cameras=None, fps: int = 30,
                        image_camera: Optional[str] = "observation.images.side",
                        vcodec: str = "libsvtav1", seed: int = 0,
                        depth_camera: Optional[str] = None,
                        language: bool = False) -> WrittenDataset:
    """A v3.0 dataset written by LeRobot's own recorder (``LeRobotDataset.create``, then
    ``add_frame`` per frame and ``save_episode`` per episode, ``finalize``): its videos encoded
    by LeRobot (``vcodec``, its default AV1 unless told) and packed into its files, its
    offsets, episode table and statistics (per episode, and aggregated) LeRobot's. Needs the
    lerobot package (``make test-lerobot``).

    ``cameras`` maps each video feature to its (height, width) (default: a 48x64 top camera
    and a 32x40 wrist camera, moving pictures with a seeded grain); ``image_camera`` adds an
    image feature (PNG in the data files) of 24x32. Rows: ``observation.state``, six joint
    angles in degrees (:data:`STILL_JOINT` barely moves), ``observation.gripper`` (one value
    in [0, 1]), ``action`` (the next state, with noise), a task per episode (two tasks,
    alternating).

    LeRobot 0.6 and later only: ``depth_camera`` adds a depth camera of the top camera's size
    (metres, float32, a surface sloping from 0.3 to 2.3 m that moves per frame), which LeRobot
    quantizes and encodes as it records depth (12-bit log codes, lossless HEVC gray12le);
    ``language`` adds LeRobot 0.6's language columns afterwards (its recorder leaves them to
    its annotation pipeline), with :func:`add_language_columns`."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    encoders: dict = {"vcodec": vcodec}
    try:  # LeRobot 0.6 takes encoder settings as configs
        from lerobot.configs.video import RGBEncoderConfig

        encoders = {"rgb_encoder": RGBEncoderConfig(vcodec=vcodec)}
    except ImportError:
        if depth_camera or language:
            raise

    if cameras is None:
        cameras = {DEFAULT_CAMERA: (48, 64), "observation.images.wrist": (32, 40)}
    features = {
        camera: {"dtype": "video", "shape": (height, width, 3),
                 "names": ["height", "width", "channels"]}
        for camera, (height, width) in cameras.items()
    }
    if image_camera:
        features[image_camera] = {"dtype": "image", "shape": (24, 32, 3),
                                  "names": ["height", "width", "channels"]}
    depth_size = next(iter(cameras.values()))
    if depth_camera:
        features[depth_camera] = {"dtype": "video", "shape": (*depth_size, 1),
                                  "names": ["height", "width", "channels"],
                                  "info": {"is_depth_map": True}}
    features.update({
        "observation.state": {"dtype": "float32", "shape": (6,), "names": None},
        "observation.gripper": {"dtype": "float32", "shape": (1,), "names": None},
        "action": {"dtype": "float32", "shape": (6,), "names": None},
    })
    dataset = LeRobotDataset.create("local/recorded", fps=fps, features=features,
                                    root=str(root), use_videos=True, **encoders)
    rng = np.random.default_rng(seed)
    episode_task = [e % len(TASKS) for e in range(len(episodes))]
    for e, length in enumerate(episodes):
        phase = rng.uniform(0, 2 * np.pi, size=6)
        t = np.arange(length + 1) / fps
        joints = (_JOINT_CENTRES + _JOINT_SWINGS * np.sin(2 * np.pi * 0.5 * t[:, None] + phase)
                  + 0.01 * rng.normal(size=(length + 1, 6))).astype(np.float32)
        for f in range(length):
            frame = {
                "observation.state": joints[f],
                "observation.gripper": np.array([0.5 + 0.5 * np.sin(t[f] + e)], np.float32),
                "action": (joints[f + 1] + 0.1 * rng.normal(size=6)).astype(np.float32),
                "task": TASKS[episode_task[e]],
            }
            for camera, (height, width) in cameras.items():
                picture = rng.integers(0, 24, (height, width, 3), dtype=np.uint8)
                # A bar sweeping across, a level per frame: every frame a different picture.
                picture[:, :, 0] += np.uint8((f * 7) % 200)
                bar = (f * 3 + e * 5) % width
                picture[:, bar:bar + 4, 1] = 230
                frame[camera] = picture
            if image_camera:
                frame[image_camera] = rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)
            if depth_camera:
                y, x = np.mgrid[0:depth_size[0], 0:depth_size[1]]
                slope = (x + y + f * 3 + e * 7) % (depth_size[0] + depth_size[1])
                frame[depth_camera] = (0.3 + 2.0 * slope / (depth_size[0] + depth_size[1])
                                       ).astype(np.float32)[:, :, None]
            dataset.add_frame(frame)
        dataset.save_episode()
    dataset.finalize()
    if language:
        add_language_columns(str(root))
    recorded = list(cameras) + ([depth_camera] if depth_camera else [])
    return WrittenDataset(str(root), "v3.0", list(episodes), fps, recorded, list(TASKS),
                          episode_task)


# ---------------------------------------------------------------------------------------------
# Language columns (LeRobot 0.6: "dtype": "language", written by its annotation pipeline)

_TOOL_CALLS = pa.list_(pa.string())  # LeRobot's JSON type is stored as strings
_PERSISTENT_ROW = pa.struct([
    pa.field("role", pa.string(), nullable=False), pa.field("content", pa.string()),
    pa.field("style", pa.string()), pa.field("timestamp", pa.float32(), nullable=False),
    pa.field("camera", pa.string()), pa.field("tool_calls", _TOOL_CALLS)])
_EVENT_ROW = pa.struct([
    pa.field("role", pa.string(), nullable=False), pa.field("content", pa.string()),
    pa.field("style", pa.string()), pa.field("camera", pa.string()),
    pa.field("tool_calls", _TOOL_CALLS)])
#: info.json's "tools" of :func:`add_language_columns`: one tool schema, as LeRobot 0.6 keeps them.
LANGUAGE_TOOLS = [{"type": "function", "function": {
    "name": "say", "description": "Speak a sentence aloud.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                   "required": ["text"]}}}]


def language_rows(episode: int, frame: int) -> Tuple[list, list]:
    """The ``language_persistent`` and ``language_events`` values of (episode, frame): a plan
    per episode that a subtask joins from frame 2, and an interjection every third frame."""
    persistent = [{"role": "assistant", "content": f"plan of episode {episode}", "style": "plan",
                   "timestamp": 0.0, "camera": None, "tool_calls": None}]
    if frame >= 2:
        persistent.append({"role": "assistant", "content": f"subtask {episode}.{frame // 2}",
                           "style": "subtask", "timestamp": 2 / 30, "camera": None,
                           "tool_calls": None})
    events = [] if frame % 3 else [{"role": "user", "content": f"stop at {frame}?",
                                    "style": "interjection", "camera": None,
                                    "tool_calls": ['{"name": "say", "arguments": {"text": "ok"}}']}]
    return persistent, events


def add_language_columns(root: str) -> None:
    """Adds LeRobot 0.6's two language columns (:func:`language_rows` of every row) to each
    data file of the v3.0 dataset at ``root``, their features (``"dtype": "language"``) and a
    ``tools`` list (:data:`LANGUAGE_TOOLS`) to its info.json, as LeRobot's annotation pipeline
    does."""
    for path in sorted(glob.glob(os.path.join(root, "data", "*", "*.parquet"))):
        table = pq.read_table(path)
        pairs = [language_rows(e, f) for e, f in zip(table.column("episode_index").to_pylist(),
                                                     table.column("frame_index").to_pylist())]
        table = table.append_column(pa.field("language_persistent", pa.list_(_PERSISTENT_ROW)),
                                    pa.array([p for p, _ in pairs], pa.list_(_PERSISTENT_ROW)))
        table = table.append_column(pa.field("language_events", pa.list_(_EVENT_ROW)),
                                    pa.array([e for _, e in pairs], pa.list_(_EVENT_ROW)))
        pq.write_table(table, path)
    info_path = os.path.join(root, "meta", "info.json")
    with open(info_path, encoding="utf-8") as f:
        info = json.load(f)
    for name in ("language_persistent", "language_events"):
        info["features"][name] = {"dtype": "language", "shape": [1], "names": None}
    info["tools"] = LANGUAGE_TOOLS
    with open(info_path, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=4)
