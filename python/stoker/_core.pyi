"""stoker's C++ core"""

from collections.abc import Callable, Sequence
import enum
from typing import Annotated, Final, overload

import numpy
from numpy.typing import NDArray


class Error(RuntimeError):
    """Base class of every error stoker raises."""

class DecodeError(Error):
    """
    A video could not be opened or decoded as asked; the message names the file and frame.
    """

class DatasetError(Error):
    """
    A dataset is malformed or inconsistent; the message names the episode, camera and file.
    """

class InvalidArgumentError(Error, ValueError):
    """
    A call asked for something impossible (an index out of range, a bad option); also a ValueError.
    """

class InternalError(Error):
    """
    A bug in stoker: one of its own invariants did not hold. Please report it with the message.
    """

class ResourceError(Error, MemoryError):
    """
    The system refused memory or threads that stoker asked for (a limit, or a configuration asking for more than the machine has); also a MemoryError.
    """

class AccessDeniedError(Error, PermissionError):
    """
    An object store refused the credentials (a wrong secret, an expired presigned URL, no access to the bucket); the message names the URL. Also a PermissionError.
    """

class DType(enum.Enum):
    """The element type of stoker's arrays (numpy/torch names)."""

    uint8 = 0

    bool = 1

    int64 = 2

    float16 = 3

    bfloat16 = 4

    float32 = 5

    float64 = 6

    uint16 = 7

    int8 = 8

    int16 = 9

    int32 = 10

    uint32 = 11

    uint64 = 12

def usable_cores() -> int:
    """
    The CPUs this process may run on (its affinity mask: taskset, cgroup cpusets, job schedulers); what stoker sizes its thread pools by.
    """

def commit_file(temporary: str, path: str) -> None:
    """
    Makes the finished file `temporary` durable and renames it to `path` in the same folder (fsync, rename, fsync of the folder), as stoker's C++ writes its own files.
    """

class RemoteOptions:
    """
    How to reach and read remote objects (see stoker/remote_source.h); empty strings and zeros mean 'from the environment' or the default.
    """

    def __init__(self, *, region: str = '', endpoint_url: str = '', profile: str = '', access_key_id: str = '', secret_access_key: str = '', session_token: str = '', anonymous: bool = False, max_attempts: int = 0, total_timeout_s: float = 0.0, connect_timeout_s: float = 0.0, low_speed_timeout_s: float = 0.0, backoff_base_s: float = 0.0, backoff_max_s: float = 0.0, read_through_gap_bytes: int = -1, min_request_bytes: int = 0) -> None: ...

    @property
    def region(self) -> str: ...

    @region.setter
    def region(self, arg: str, /) -> None: ...

    @property
    def endpoint_url(self) -> str:
        """implies path-style addressing"""

    @endpoint_url.setter
    def endpoint_url(self, arg: str, /) -> None: ...

    @property
    def profile(self) -> str: ...

    @profile.setter
    def profile(self, arg: str, /) -> None: ...

    @property
    def access_key_id(self) -> str: ...

    @access_key_id.setter
    def access_key_id(self, arg: str, /) -> None: ...

    @property
    def secret_access_key(self) -> str: ...

    @secret_access_key.setter
    def secret_access_key(self, arg: str, /) -> None: ...

    @property
    def session_token(self) -> str: ...

    @session_token.setter
    def session_token(self, arg: str, /) -> None: ...

    @property
    def anonymous(self) -> bool:
        """unsigned requests (public buckets)"""

    @anonymous.setter
    def anonymous(self, arg: bool, /) -> None: ...

    @property
    def max_attempts(self) -> int:
        """0: 8"""

    @max_attempts.setter
    def max_attempts(self, arg: int, /) -> None: ...

    @property
    def total_timeout_s(self) -> float:
        """0: 120"""

    @total_timeout_s.setter
    def total_timeout_s(self, arg: float, /) -> None: ...

    @property
    def connect_timeout_s(self) -> float:
        """0: 10"""

    @connect_timeout_s.setter
    def connect_timeout_s(self, arg: float, /) -> None: ...

    @property
    def low_speed_timeout_s(self) -> float:
        """0: 15"""

    @low_speed_timeout_s.setter
    def low_speed_timeout_s(self, arg: float, /) -> None: ...

    @property
    def backoff_base_s(self) -> float:
        """0: 0.05"""

    @backoff_base_s.setter
    def backoff_base_s(self, arg: float, /) -> None: ...

    @property
    def backoff_max_s(self) -> float:
        """0: 5"""

    @backoff_max_s.setter
    def backoff_max_s(self, arg: float, /) -> None: ...

    @property
    def read_through_gap_bytes(self) -> int:
        """-1: 1 MiB"""

    @read_through_gap_bytes.setter
    def read_through_gap_bytes(self, arg: int, /) -> None: ...

    @property
    def min_request_bytes(self) -> int:
        """0: 256 KiB"""

    @min_request_bytes.setter
    def min_request_bytes(self, arg: int, /) -> None: ...

def resolve_remote_options(options: RemoteOptions) -> RemoteOptions:
    """
    `options` with every empty field filled from the environment (AWS variables, ~/.aws/credentials and ~/.aws/config) and the defaults.
    """

def set_remote_options(prefix: str, options: RemoteOptions) -> None:
    """
    Options for every URL starting with `prefix` that stoker opens (the longest prefix wins).
    """

def configure_remote_cache(memory_bytes: int, disk_folder: str = '', disk_bytes: int = 0) -> None:
    """
    The process's range cache: `memory_bytes` in memory, and up to `disk_bytes` in `disk_folder` when it is not empty.
    """

def remote_stats() -> dict:
    """Counters of this process's remote reads since it started."""

def list_objects(prefix_url: str, remember: bool = False) -> list[tuple[str, int, str]]:
    """
    (url, size, ETag) of every object under an s3:// prefix, in key order: one ListObjectsV2 request per 1,000 objects. remember: the engine then opens these objects with what the listing said, without a HEAD each (remember_listed_objects).
    """

def remember_objects(urls: Sequence[str], sizes: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], etags: Sequence[str]) -> None:
    """
    Tells the engine the size and ETag of objects (a listing's, or an index's record of one): it opens them without a HEAD each and reads them with If-Match (remember_listed_objects).
    """

def byte_slice_name(whole: str, offset: int, length: int) -> str:
    """
    The name of `length` bytes at `offset` of the file or object `whole` ('<whole>#bytes=<offset>+<length>'): what open_source, VideoReader and the episode index read as a file of its own (stoker/byte_slice.h).
    """

def parse_byte_slice(name: str) -> tuple[str, int, int] | None:
    """
    (whole, offset, length) of a byte slice's name, or None for a plain path or URL.
    """

def stat_source(path_or_url: str) -> tuple[int, str, int]:
    """
    (size, version_tag, mtime_ns) of a local file or a remote object (opened once per process and URL).
    """

def read_ranges(path_or_url: str, offsets: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], sizes: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> NDArray[numpy.uint8]:
    """
    The bytes of each range [offset, offset + size) of a local file (pread) or a remote object (the ranges prefetched together through the range cache), one after another.
    """

def is_remote_url(path: str) -> bool:
    """Whether `path` is an s3://, http:// or https:// URL."""

class Layout(enum.Enum):
    NHWC = 0
    """[N, H, W, 3] interleaved RGB"""

    NCHW = 1
    """[N, 3, H, W] planar RGB"""

class PixelFormat(enum.Enum):
    rgb24 = 0
    """8-bit RGB, 3 bytes a pixel"""

    gray16 = 1
    """one native-endian uint16 a pixel: the stored samples (depth maps)"""

class Interpolation(enum.Enum):
    bilinear = 0

    area = 1

class VideoCodec(enum.Enum):
    h264 = 0
    """libx264"""

    av1 = 1
    """libsvtav1"""

class EncoderOptions:
    """
    How stoker encodes video (see stoker/video_encoder.h); the defaults are the ETL's.
    """

    def __init__(self) -> None: ...

    @property
    def codec(self) -> VideoCodec: ...

    @codec.setter
    def codec(self, arg: VideoCodec, /) -> None: ...

    @property
    def gop(self) -> int: ...

    @gop.setter
    def gop(self, arg: int, /) -> None: ...

    @property
    def crf(self) -> int:
        """-1: 23 for H.264, 30 for AV1"""

    @crf.setter
    def crf(self, arg: int, /) -> None: ...

    @property
    def preset(self) -> str:
        """'': medium for libx264, 8 for libsvtav1"""

    @preset.setter
    def preset(self, arg: str, /) -> None: ...

    @property
    def fast_decode(self) -> bool: ...

    @fast_decode.setter
    def fast_decode(self, arg: bool, /) -> None: ...

    @property
    def threads(self) -> int: ...

    @threads.setter
    def threads(self, arg: int, /) -> None: ...

    def with_codec_defaults(self) -> EncoderOptions:
        """A copy with the codec's crf and preset in place of -1 and ''."""

    def check(self, height: int, width: int) -> None:
        """
        Raises stoker.InvalidArgumentError unless these options can encode height x width pictures.
        """

class VideoReader:
    def __init__(self, path: str, threads: int = 1, frame_table: bytes | None = None) -> None: ...

    @staticmethod
    def from_bytes(name: str, data: bytes, threads: int = 1, frame_table: bytes | None = None) -> VideoReader:
        """
        A reader over a copy of `data` (a video held in memory), called `name` in messages.
        """

    @property
    def name(self) -> str:
        """The path, or the name given to bytes."""

    def source_bytes(self) -> object:
        """
        A copy of the bytes of a reader opened from bytes (for pickling); None for a file.
        """

    @property
    def codec(self) -> str: ...

    @property
    def width(self) -> int: ...

    @property
    def height(self) -> int: ...

    @property
    def fps(self) -> float: ...

    @property
    def num_frames(self) -> int: ...

    @property
    def duration(self) -> float: ...

    def pts(self) -> NDArray[numpy.float64]: ...

    def is_key(self) -> NDArray[numpy.uint8]: ...

    def packet_bytes(self, frames: Sequence[int] | None = None) -> list[tuple[int, int]]: ...

    def frame_table(self) -> bytes: ...

    def frame_at(self, arg0: float, arg1: float | None, /) -> int: ...

    def get_frames(self, indices: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], out: Annotated[NDArray[numpy.uint8], dict(order='C', device='cpu')], height: int, width: int, layout: Layout, interpolation: Interpolation, pixel_format: PixelFormat = PixelFormat.rgb24) -> None: ...

    def get_frames_at(self, seconds: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], tolerance: float | None, out: Annotated[NDArray[numpy.uint8], dict(order='C', device='cpu')], height: int, width: int, layout: Layout, interpolation: Interpolation, pixel_format: PixelFormat = PixelFormat.rgb24) -> None: ...

    def verify(self) -> dict:
        """
        Decodes every packet from the first, converting none, and says per frame what came out (see stoker/video_reader.h VerifyReport): a dict of width, height, pixel_format (int32 arrays; 0, 0, -1 where no frame came out), corrupt (uint8), difference (float32: mean absolute luma difference from the previous frame, -1 where unknown), refused and unmatched ([(packet, why)], [(packet, frame)]), stopped (str), pixel_format_names ({code: name}) and packets_decoded.
        """

class ClipSource:
    """
    A video that clips are copied from without re-encoding (see stoker/clip_cutter.h): its source and frame table, read once. Its methods may be called from several threads at once.
    """

    def __init__(self, source: str, frame_table: bytes | None) -> None:
        """
        Opens `source` (a path or URL) with its saved `frame_table`, or None to scan it.
        """

    @property
    def name(self) -> str: ...

    def refusal(self, first_frame: int, num_frames: int, format: str = '') -> str | None:
        """
        Why copy() would refuse frames [first_frame, first_frame + num_frames) (not a run of packets from a keyframe, a cut group of reordered frames, a codec `format` cannot store), or None when it copies them.
        """

    def copy(self, first_frame: int, num_frames: int, target: str, format: str = '') -> dict:
        """
        Copies the packets of frames [first_frame, first_frame + num_frames) into a new file `target` (atomically, checked); `format` is FFmpeg's muxer name, '' for the source's container. Returns frames, bytes and first_packet. Raises stoker.InvalidArgumentError when the run cannot be copied (see refusal()).
        """

def build_episode_index(path: str, *, fps: float, episode_from_row: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], episode_length: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], episode_task: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], row_timestamp: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], cameras: Sequence[str], video_files: Sequence[str], episode_video: Annotated[NDArray[numpy.int64], dict(shape=(None, None), order='C', device='cpu', writable=False)], episode_video_offset: Annotated[NDArray[numpy.float64], dict(shape=(None, None), order='C', device='cpu', writable=False)], columns: Sequence[tuple[str, Annotated[NDArray, dict(order='C', device='cpu')]]], tracked_files: Sequence[str], tolerance_s: float, threads: int, progress: Callable | None = None, image_cameras: Sequence[tuple[str, Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]]] = [], image_file: str = '', keep_broken_episodes: bool = False, attached_arrays: Sequence[tuple[str, Annotated[NDArray, dict(order='C', device='cpu', writable=False)]]] = [], attached_strings: Sequence[tuple[str, Sequence[str]]] = []) -> dict:
    """
    Builds the episode index of a dataset from its columns and writes it to `path` (everything but the path by keyword; EpisodeIndexSource in stoker/episode_index.h says what each is).
    image_cameras: (name, offset, length) per image camera, each row's image in image_file.
    keep_broken_episodes: episodes a camera's video cannot serve are recorded in the index (EpisodeIndex.broken_episodes) instead of failing the build.
    attached_arrays, attached_strings: (name, 1-D int32/int64/float32/float64 array) and (name, list of str) kept in the index for its readers (attached_array, attached_strings).
    Returns {'seconds': float, 'max_drift_s': float64 array, one per video file}.
    """

def place_episodes(fps: float, episode_from_row: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], episode_length: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], row_timestamp: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], episode_video: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], episode_video_offset: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], video_files: Sequence[str], frame_tables: Sequence[VideoReader | None], tolerance_s: float, camera: str) -> dict:
    """
    Where each episode of one camera starts in its video file, exactly as the episode index build places it (dataset/episode_placement.h): per episode its file (episode_video, an index into video_files) and stated start in it (episode_video_offset); frame_tables: per file the VideoReader whose frame table it has, or None (its episodes are left unplaced).
    Returns {'first_frame': int64 [E] (-1 where unplaced), 'drift': float64 [E] (the first frame's pts minus the stated start; NaN where unplaced), 'snap': float64 [E] (the first frame's pts minus the time sought; 0 where the episodes tile their file), 'order': int64 (the placed episodes, file by file, each file's in their order in it), 'problems': [(episode, camera, file, why)] (what the index build records as broken)}.
    """

class EpisodeIndex:
    @staticmethod
    def open(path: str) -> EpisodeIndex: ...

    @property
    def num_rows(self) -> int: ...

    @property
    def num_episodes(self) -> int: ...

    @property
    def fps(self) -> float: ...

    @property
    def cameras(self) -> list[str]: ...

    @property
    def num_video_cameras(self) -> int:
        """
        The video cameras come first in `cameras`; the others are image cameras.
        """

    @property
    def image_file(self) -> str: ...

    @property
    def broken_episodes(self) -> list[tuple[int, int, str]]:
        """
        (episode, camera, why) of each episode a camera's video could not serve when the index was built (with keep_broken_episodes); their rows must not be read.
        """

    def image_bytes(self, camera: int, row: int) -> bytes:
        """A copy of the encoded image of an image camera at one row."""

    @property
    def video_files(self) -> list[str]: ...

    @property
    def column_names(self) -> list[tuple[str, str, int]]: ...

    @property
    def checksum(self) -> int:
        """
        CRC-32C of the index file's contents: tells one build of an index from another.
        """

    def stale_files(self) -> list[str]: ...

    def episode_of_row(self, row: int) -> int: ...

    def frame_of_row(self, camera: int, row: int) -> int: ...

    def episode_of_rows(self, rows: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> NDArray[numpy.int64]: ...

    def frames_of_rows(self, camera: int, rows: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> NDArray[numpy.int64]: ...

    def episode_table(self) -> tuple: ...

    def episode_views(self) -> tuple:
        """
        (from_row, length, task) per episode, as episode_table() but read-only views of the mapped file (nothing copied); they keep the index alive.
        """

    def attached_array(self, name: str) -> object:
        """
        A read-only view of an array attached at build, in the mapped file; it keeps the index alive. KeyError when there is none of that name.
        """

    def attached_strings(self, name: str) -> list[str]:
        """
        A list of strings attached at build. KeyError when there is none of that name.
        """

    def videos_of(self, camera: int) -> NDArray[numpy.int64]: ...

    def first_frames(self, camera: int) -> NDArray[numpy.int64]: ...

    def drifts(self, camera: int) -> NDArray[numpy.float64]: ...

    def frame_table(self, video: int) -> bytes: ...

    def column(self, name: str) -> object:
        """
        A read-only [rows, dim] view of a column in the mapped file; it keeps the index alive.
        """

class WindowKey:
    """
    One output key of a window: its name, the camera or column it reads, and its offsets in rows (empty: the sample's own row, without a time axis); drop_time_axis: one offset, output without its time axis (LeRobot's squeeze of a one-frame window).
    """

    def __init__(self, name: str, source: str, offsets: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], *, drop_time_axis: bool = False) -> None: ...

    @property
    def name(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def offsets(self) -> list[int]: ...

    @property
    def drop_time_axis(self) -> bool: ...

class WindowPlanner:
    def __init__(self, index: EpisodeIndex, keys: Sequence[WindowKey]) -> None: ...

    def plan(self, row: int) -> dict:
        """
        Rows, pad masks and per-camera frames of sample `row` (see stoker/window_plan.h).
        """

    def costs(self, rows: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> NDArray[numpy.float64]:
        """Estimated decode cost of each sample (see WindowPlanner::cost)."""

class ShardIndex:
    @property
    def url(self) -> str: ...

    @property
    def shard_bytes(self) -> int: ...

    @property
    def damage(self) -> str:
        """
        "" when the tar was whole; else what is wrong and where (the members after it are not in the index).
        """

    @property
    def names(self) -> list[str]: ...

    @property
    def offsets(self) -> NDArray[numpy.int64]: ...

    @property
    def sizes(self) -> NDArray[numpy.int64]: ...

    @property
    def labels(self) -> NDArray[numpy.int64]:
        """Per member: a small .cls member's integer, else NO_LABEL."""

    NO_LABEL: Final[int] = ...
    """(arg: object, /) -> int"""

    def read(self, members: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> tuple[NDArray[numpy.uint8], NDArray[numpy.int64]]:
        """
        (bytes, starts): members `members` read one after another, each its tar header then its data, which starts at bytes[starts[i]]. Every header is checked against the index, and the shard's version against the one it had when the index was opened: a shard rewritten, replaced or resized since is a DatasetError saying it changed since its index was made.
        """

class ShardSamples:
    """
    The samples of a dataset of tar shards, grouped from their indexes (stoker/shard_samples.h).
    """

    @staticmethod
    def open(urls: Sequence[str], cache_dir: str, threads: int) -> tuple[ShardSamples, list[str]]:
        """
        (samples, [why each shard's sidecar was refused, or ""]): from the table saved under cache_dir for these shards at their versions, else from their indexes (cache, sidecar or scan, `threads` at a time), grouped, the table saved.
        """

    @staticmethod
    def reopen(table: str, version: str, cache_dir: str) -> ShardSamples:
        """
        The samples of a table open() saved, whose file had `version` then: one stat and one map. A DatasetError when it is not that file any more.
        """

    def __len__(self) -> int: ...

    @property
    def urls(self) -> list[str]: ...

    @property
    def shard_bytes(self) -> NDArray[numpy.int64]: ...

    @property
    def shard_members(self) -> NDArray[numpy.int64]: ...

    @property
    def damaged(self) -> list[tuple[int, str, int]]:
        """
        [(shard, what is wrong and where, members before it)] of the damaged shards.
        """

    @property
    def damage(self) -> list[str]:
        """Per shard: "" when its tar was whole, else what is wrong and where."""

    @property
    def sample_shard(self) -> Annotated[NDArray[numpy.int32], dict(shape=(None,), writable=False)]: ...

    @property
    def first_member(self) -> Annotated[NDArray[numpy.int32], dict(shape=(None,), writable=False)]: ...

    @property
    def labels(self) -> Annotated[NDArray[numpy.int64], dict(shape=(None,), writable=False)]:
        """Per sample: its .cls member's integer, -1 when it has none."""

    @property
    def shard_first(self) -> Annotated[NDArray[numpy.int64], dict(shape=(None,), writable=False)]:
        """Per shard and one more: its first sample's number (the last: len())."""

    def key(self, sample: int) -> str: ...

    @property
    def keys(self) -> list[str]:
        """Every sample's key (a list built on each call)."""

    @property
    def fields(self) -> list[str]:
        """The field names the members have, sorted."""

    def field_members(self, name: str) -> object:
        """
        Per sample: its member of field `name` (its number in its shard's index), -1 when it has none; None when no sample has it.
        """

    def resolve(self, alternatives: Sequence[str], samples: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> NDArray[numpy.int64]:
        """
        Per sample of `samples`: its member of the first of `alternatives` it has, -1 when none.
        """

    @property
    def duplicates(self) -> list[tuple[int, str, str]]:
        """
        [(sample, field, the second member's name)] for every field a sample has twice.
        """

    def bad_samples(self, fields: Sequence[str]) -> list[tuple[int, str]]:
        """
        [(sample, why)] of the samples that have one of `fields` twice, sorted: what a loader reading those fields refuses (or skips).
        """

    def index(self, shard: int) -> ShardIndex:
        """The shard's ShardIndex, opened on first use."""

    @property
    def table_path(self) -> str: ...

    @property
    def table_version(self) -> str: ...

def decode_shard_members(decoder: str, members: Sequence[bytes], json_keys: Sequence[tuple[str, str]] = []) -> list[tuple[str, str, list[int]]]:
    """
    Per member, (error, dtype, shape): error "" when the loader reads it as a member of a `decoder` field ("label", "text", "tokens", "array" or "json", reading json_keys: (key, "int64" | "float64" | "float32" | "bool" | "str")), else the loader's refusal in its words (dataset/shard_members.h); dtype and shape of an array or token array, else "" and [].
    """

def open_shard_indexes(urls: Sequence[str], cache_dir: str, threads: int) -> tuple[list[ShardIndex], list[str]]:
    """
    ([ShardIndex per URL], [why each one's sidecar was refused, or ""]): each shard's index from the cache under cache_dir ("": none), its sidecar <url>.index when it matches the shard's headers, or a scan of its tar headers; `threads` shards at a time.
    """

def write_shard_sidecar(path: str) -> None:
    """
    Scans the local shard at `path` and writes its index beside it, as `<path>.index` (durably: written, flushed, renamed). A damaged tar is a DatasetError.
    """

class Sampler:
    @property
    def size(self) -> int: ...

    def epoch_size(self, epoch: int) -> int: ...

    def at(self, epoch: int, position: int) -> int: ...

    def fill(self, epoch: int, start: int, count: int) -> NDArray[numpy.int64]: ...

    def elastic_remainder(self, epoch: int, delivered: int) -> tuple[int, int]:
        """
        (epoch, start): the elastic resume that goes on with `epoch` on any world size once every rank of this run delivered its first `delivered` positions of it.
        """

class DistributedSampler(Sampler):
    def __init__(self, n: int, *, shuffle: bool = True, seed: int = 0, rank: int = 0, world_size: int = 1, drop_last: bool = False, resume: tuple[int, int] | None = None) -> None:
        """
        Samples 0 .. n - 1 per epoch, this rank's share (stoker/sampling.h, DistributedOptions: the keywords' defaults are its).
        """

class MappedSampler(Sampler):
    def __init__(self, inner: Sampler, ids: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> None: ...

class WeightedSampler(Sampler):
    def __init__(self, weights: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], *, num_samples: int | None = None, seed: int = 0, rank: int = 0, world_size: int = 1, drop_last: bool = False, resume: tuple[int, int] | None = None) -> None: ...

class MixSampler(Sampler):
    def __init__(self, weights: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], sizes: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], *, num_samples: int | None = None, seed: int = 0, rank: int = 0, world_size: int = 1, drop_last: bool = False, resume: tuple[int, int] | None = None) -> None:
        """
        Draws over datasets laid end to end: a dataset by weight, then one of its samples.
        """

class LoadBalancedSampler(Sampler):
    def __init__(self, costs: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], *, batch_size: int = 1, shuffle: bool = True, seed: int = 0, rank: int = 0, world_size: int = 1, drop_last: bool = False, resume: tuple[int, int] | None = None) -> None: ...

    def report(self, epoch: int) -> dict: ...

class ShardStreamSampler(Sampler):
    def __init__(self, counts: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], shard_bytes: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], *, shuffle: bool = True, seed: int = 0, shuffle_buffer: int = 8192, rank: int = 0, world_size: int = 1, equal_batches: bool = False, drop_last: bool = False, batch_size: int = 1, resume: tuple[int, int, Sequence[tuple[int, int, int]]] | None = None) -> None:
        """
        A shard dataset's order for one rank (see stoker/shard_order.h); `resume`: an elastic resume, (epoch, world_size, [(rank, begin, end), ...]).
        """

    def remainder(self, epoch: int, delivered: Sequence[int]) -> tuple[int, int, list[tuple[int, int, int]]]:
        """
        What the run's ranks had not delivered of `epoch` after delivered[r] positions each, as an elastic resume (epoch, world_size, pieces).
        """

    def epoch_stream(self, epoch: int) -> Annotated[NDArray[numpy.int64], dict(writable=False)]:
        """
        This rank's ids of `epoch` in reading order, before the shuffle buffer (read-only).
        """

    def epoch_order(self, epoch: int) -> Annotated[NDArray[numpy.int64], dict(writable=False)]:
        """The ids of `epoch`'s positions: the buffer's output, cut (read-only)."""

def expand_group_weights(weights: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], sizes: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], per_sample: bool) -> NDArray[numpy.float64]: ...

def deal_shards(shard_bytes: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], shuffle: bool, seed: int, epoch: int, world_size: int) -> list:
    """
    Each rank's shards in `epoch`, dealt by bytes (see stoker/shard_order.h).
    """

def shuffle_buffer_order(stream: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], buffer_size: int, seed: int, epoch: int, rank: int) -> NDArray[numpy.int64]:
    """What a bounded shuffle buffer emits for `stream`."""

def shuffle_buffer_state(stream: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], buffer_size: int, seed: int, epoch: int, rank: int, emitted: int) -> tuple:
    """
    (ids taken in, the buffer's ids) after `emitted` ids of shuffle_buffer_order().
    """

class CropMode(enum.Enum):
    none = 0

    center = 1

    random_resized = 2

class TransformOptions:
    """
    Resize, crop, flip, normalization, dtype and layout of a camera's frames.
    """

    def __init__(self) -> None: ...

    @property
    def resize_height(self) -> int: ...

    @resize_height.setter
    def resize_height(self, arg: int, /) -> None: ...

    @property
    def resize_width(self) -> int: ...

    @resize_width.setter
    def resize_width(self, arg: int, /) -> None: ...

    @property
    def crop(self) -> CropMode: ...

    @crop.setter
    def crop(self, arg: CropMode, /) -> None: ...

    @property
    def crop_height(self) -> int: ...

    @crop_height.setter
    def crop_height(self, arg: int, /) -> None: ...

    @property
    def crop_width(self) -> int: ...

    @crop_width.setter
    def crop_width(self, arg: int, /) -> None: ...

    @property
    def scale_min(self) -> float: ...

    @scale_min.setter
    def scale_min(self, arg: float, /) -> None: ...

    @property
    def scale_max(self) -> float: ...

    @scale_max.setter
    def scale_max(self, arg: float, /) -> None: ...

    @property
    def ratio_min(self) -> float: ...

    @ratio_min.setter
    def ratio_min(self, arg: float, /) -> None: ...

    @property
    def ratio_max(self) -> float: ...

    @ratio_max.setter
    def ratio_max(self, arg: float, /) -> None: ...

    @property
    def hflip_probability(self) -> float: ...

    @hflip_probability.setter
    def hflip_probability(self, arg: float, /) -> None: ...

    @property
    def normalize(self) -> bool: ...

    @normalize.setter
    def normalize(self, arg: bool, /) -> None: ...

    @property
    def mean(self) -> list[float]: ...

    @mean.setter
    def mean(self, arg: Sequence[float], /) -> None: ...

    @property
    def std(self) -> list[float]: ...

    @std.setter
    def std(self, arg: Sequence[float], /) -> None: ...

    @property
    def dtype(self) -> DType: ...

    @dtype.setter
    def dtype(self, arg: DType, /) -> None: ...

    @property
    def layout(self) -> Layout: ...

    @layout.setter
    def layout(self, arg: Layout, /) -> None: ...

    @property
    def interpolation(self) -> Interpolation: ...

    @interpolation.setter
    def interpolation(self, arg: Interpolation, /) -> None: ...

class DepthCoding(enum.Enum):
    affine = 0

    lerobot_linear = 1

    lerobot_log = 2

class DepthUnit(enum.Enum):
    metres = 0

    millimetres = 1

class DepthCamera:
    """
    A depth camera of a Loader: one channel, uint16 as stored or float32 distances.
    """

    @overload
    def __init__(self) -> None: ...

    @overload
    def __init__(self, camera: str, metric: bool = False, scale: float = 1.0, offset: float = 0.0, coding: DepthCoding = DepthCoding.affine, depth_min: float = 0.01, depth_max: float = 10.0, shift: float = 3.5, code_max: int = 4095, unit: DepthUnit = DepthUnit.metres) -> None: ...

    @property
    def camera(self) -> str: ...

    @camera.setter
    def camera(self, arg: str, /) -> None: ...

    @property
    def metric(self) -> bool:
        """False: uint16 samples; True: float32 distances"""

    @metric.setter
    def metric(self, arg: bool, /) -> None: ...

    @property
    def scale(self) -> float:
        """affine: metres per stored unit"""

    @scale.setter
    def scale(self, arg: float, /) -> None: ...

    @property
    def offset(self) -> float:
        """affine: metres added"""

    @offset.setter
    def offset(self, arg: float, /) -> None: ...

    @property
    def coding(self) -> DepthCoding: ...

    @coding.setter
    def coding(self, arg: DepthCoding, /) -> None: ...

    @property
    def depth_min(self) -> float:
        """LeRobot quantizers: metres at code 0"""

    @depth_min.setter
    def depth_min(self, arg: float, /) -> None: ...

    @property
    def depth_max(self) -> float:
        """LeRobot quantizers: metres at code_max"""

    @depth_max.setter
    def depth_max(self, arg: float, /) -> None: ...

    @property
    def shift(self) -> float:
        """LeRobot's log quantizer: metres added before log"""

    @shift.setter
    def shift(self, arg: float, /) -> None: ...

    @property
    def code_max(self) -> int: ...

    @code_max.setter
    def code_max(self, arg: int, /) -> None: ...

    @property
    def unit(self) -> DepthUnit: ...

    @unit.setter
    def unit(self, arg: DepthUnit, /) -> None: ...

def depth_value_table(depth: DepthCamera) -> NDArray[numpy.float32]:
    """
    float32 [65536]: the distance every stored sample stands for, in the camera's unit (what the Loader looks each pixel up in).
    """

def probe_image(data: bytes) -> tuple[str, int, int, int, int]:
    """
    (format, width, height, channels, bit_depth) from a JPEG, PNG or WebP header, without decoding.
    """

def decode_image(data: bytes, min_width: int = 0, min_height: int = 0, keep_16bit_gray: bool = False) -> object:
    """
    One JPEG, PNG or WebP as [H, W, 3] uint8 (or [H, W] uint16 for a 16-bit gray PNG with keep_16bit_gray); a JPEG at the smallest DCT scale that keeps min_width x min_height.
    """

def decode_images(images: Sequence[bytes], transform: TransformOptions, out: Annotated[NDArray, dict(order='C', device='cpu')], height: int, width: int, seed: int = 0, epoch: int = 0, ids: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)] | None = None, camera: int = 0, threads: int = 1, collect_errors: bool = False) -> list[str]:
    """
    Decodes and transforms each image into its slot of out; see stoker.decode_images.
    """

def decode_index_images(index: EpisodeIndex, camera: int, rows: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], transform: TransformOptions, out: Annotated[NDArray, dict(order='C', device='cpu')], height: int, width: int, seed: int = 0, epoch: int = 0, id: int = 0) -> None:
    """
    Decodes an image camera's images at `rows` of an EpisodeIndex into out, as the Loader does for sample `id`.
    """

class ErrorPolicy(enum.Enum):
    raise_error = 0

    skip = 1

class LoaderOptions:
    """How a Loader batches (see stoker/loader.h); the defaults are C++'s."""

    def __init__(self) -> None: ...

    @property
    def batch_size(self) -> int: ...

    @batch_size.setter
    def batch_size(self, arg: int, /) -> None: ...

    @property
    def threads(self) -> int:
        """0: usable_cores()"""

    @threads.setter
    def threads(self, arg: int, /) -> None: ...

    @property
    def prefetch(self) -> int: ...

    @prefetch.setter
    def prefetch(self, arg: int, /) -> None: ...

    @property
    def drop_last(self) -> bool: ...

    @drop_last.setter
    def drop_last(self, arg: bool, /) -> None: ...

    @property
    def seed(self) -> int: ...

    @seed.setter
    def seed(self, arg: int, /) -> None: ...

    @property
    def on_error(self) -> ErrorPolicy: ...

    @on_error.setter
    def on_error(self, arg: ErrorPolicy, /) -> None: ...

    @property
    def max_replacements(self) -> int: ...

    @max_replacements.setter
    def max_replacements(self, arg: int, /) -> None: ...

    @property
    def max_wait_records(self) -> int: ...

    @max_wait_records.setter
    def max_wait_records(self, arg: int, /) -> None: ...

    @property
    def pinned_memory(self) -> bool: ...

    @pinned_memory.setter
    def pinned_memory(self, arg: bool, /) -> None: ...

class RowKeys:
    """
    What batches say of each sample's row beside the window's keys (stoker/episode_source.h): int64 [batch] fields, `task` a column of strings.
    """

    def __init__(self, *, index: bool = False, episode_index: bool = False, frame_index: bool = False, task_index: bool = False, task: bool = False, episode_numbers: Sequence[int] = [], tasks: Sequence[str] = []) -> None: ...

    @property
    def index(self) -> bool: ...

    @property
    def episode_index(self) -> bool: ...

    @property
    def frame_index(self) -> bool: ...

    @property
    def task_index(self) -> bool: ...

    @property
    def task(self) -> bool: ...

class ShardFieldKind(enum.Enum):
    image = 0

    clip = 1

    text = 2

    label = 3

    tokens = 4

    array = 5

    json = 6

class ShardField:
    """
    One field of a shard dataset's spec, as the native loader reads it (stoker/shard_source.h).
    """

    def __init__(self) -> None: ...

    @property
    def name(self) -> str: ...

    @name.setter
    def name(self, arg: str, /) -> None: ...

    @property
    def kind(self) -> ShardFieldKind: ...

    @kind.setter
    def kind(self, arg: ShardFieldKind, /) -> None: ...

    @property
    def alternatives(self) -> list[str]: ...

    @alternatives.setter
    def alternatives(self, arg: Sequence[str], /) -> None: ...

    @property
    def transform(self) -> TransformOptions: ...

    @transform.setter
    def transform(self, arg: TransformOptions, /) -> None: ...

    @property
    def height(self) -> int: ...

    @height.setter
    def height(self, arg: int, /) -> None: ...

    @property
    def width(self) -> int: ...

    @width.setter
    def width(self, arg: int, /) -> None: ...

    @property
    def frames(self) -> list[int]: ...

    @frames.setter
    def frames(self, arg: Sequence[int], /) -> None: ...

    @property
    def layout(self) -> Layout: ...

    @layout.setter
    def layout(self, arg: Layout, /) -> None: ...

    @property
    def pad(self) -> int: ...

    @pad.setter
    def pad(self, arg: int, /) -> None: ...

    @property
    def max_length(self) -> int: ...

    @max_length.setter
    def max_length(self, arg: int, /) -> None: ...

    @property
    def json_keys(self) -> list[tuple[str, str]]: ...

    @json_keys.setter
    def json_keys(self, arg: Sequence[tuple[str, str]], /) -> None: ...

class MixPart:
    """
    One dataset of a mix, as its source (stoker/mix_source.h); one loader takes it.
    """

    @staticmethod
    def for_episodes(index: EpisodeIndex, keys: Sequence[WindowKey], transform: TransformOptions, options: LoaderOptions, depth_cameras: Sequence[DepthCamera], rows: Sequence[int], front_keys: Sequence[str], name: str, *, row_keys: RowKeys = ...) -> MixPart: ...

    @staticmethod
    def for_shards(samples: ShardSamples, fields: Sequence[ShardField], options: LoaderOptions, front_keys: Sequence[str], name: str) -> MixPart: ...

class Loader:
    def __init__(self, index: EpisodeIndex, keys: Sequence[WindowKey], sampler: Sampler, transform: TransformOptions, options: LoaderOptions, *, replacement_rows: Sequence[int] = [], depth_cameras: Sequence[DepthCamera] = [], row_keys: RowKeys = ...) -> None:
        """
        Batches of `keys` over the rows `sampler` gives (this rank's), on native threads; a failed sample replaced from `replacement_rows` (empty: every row) under skip; `depth_cameras` decoded as depth (stoker/episode_source.h).
        """

    @staticmethod
    def for_shards(samples: ShardSamples, fields: Sequence[ShardField], sampler: Sampler, options: LoaderOptions) -> Loader:
        """
        Batches of a shard dataset's `fields` over the samples `sampler` gives.
        """

    @staticmethod
    def for_mix(parts: Sequence[MixPart], sampler: Sampler, options: LoaderOptions) -> Loader:
        """
        Batches of several datasets as one, `sampler` giving ids over all their samples laid end to end (a MixSampler).
        """

    @property
    def batches_per_epoch(self) -> int: ...

    def batches_in_epoch(self, epoch: int) -> int: ...

    @property
    def pipeline_depth(self) -> int: ...

    @property
    def column_names(self) -> list[str]: ...

    @property
    def fields(self) -> list:
        """
        [(name, dtype, shape)] of every batch array; shape[0] is the batch size.
        """

    def start(self, epoch: int, batch: int, epochs: int = 1) -> None:
        """Starts a run at (epoch, batch) for `epochs` epochs (0: until stop())."""

    @property
    def position(self) -> tuple[int, int]:
        """(epoch, batch) that next() delivers next."""

    @property
    def running(self) -> bool: ...

    def next(self, torch: bool) -> object:
        """
        The next batch as (arrays, samples, episodes, epoch, index), or None at the end.
        """

    def read(self, samples: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], epoch: int, torch: bool) -> object:
        """
        A batch of `samples` built now on this thread, as (arrays, samples, episodes, epoch, index); runs are untouched.
        """

    def stop(self) -> None: ...

    def stats(self) -> dict: ...

    def reset_stats(self) -> None: ...

class TranscodeOptions:
    """
    One transcode: output size, encoder, resampling (see stoker/transcode.h).
    """

    def __init__(self) -> None: ...

    @property
    def height(self) -> int: ...

    @height.setter
    def height(self, arg: int, /) -> None: ...

    @property
    def width(self) -> int: ...

    @width.setter
    def width(self, arg: int, /) -> None: ...

    @property
    def encoder(self) -> EncoderOptions: ...

    @encoder.setter
    def encoder(self, arg: EncoderOptions, /) -> None: ...

    @property
    def interpolation(self) -> Interpolation: ...

    @interpolation.setter
    def interpolation(self, arg: Interpolation, /) -> None: ...

    @property
    def chunk_frames(self) -> int: ...

    @chunk_frames.setter
    def chunk_frames(self, arg: int, /) -> None: ...

def check_members(fields: Sequence[str], members: Sequence[bytes]) -> list[str]:
    """
    Per member, "" when the loader can read it as its field's kind (images decoded whole; json an object; txt, text UTF-8; npy an array; cls an integer; other fields unchecked), else what is wrong (stoker/member_check.h).
    """

def transcode(source: str, frame_table: bytes | None, first_frame: int, num_frames: int, target: str, options: TranscodeOptions) -> dict:
    """
    Re-encodes frames [first_frame, first_frame + num_frames) of `source` into the MP4 `target` (atomically, checked), keeping their timestamps. Returns frames, bytes, duration, seconds and pts (float64 seconds from 0).
    """
