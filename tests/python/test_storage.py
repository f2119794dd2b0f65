"""Datasets and videos in object storage: options, credentials, errors, metadata over S3 and
HTTP equal to the local copy's, the remote index cache, and (once the engine's remote sources
are merged) items, videos and faults.

The store is moto's server with signature checking on (s3_server.py): a wrong secret is refused
as AWS refuses it.
"""

import functools
import http.server
import os
import pickle
import threading
import time
import urllib.parse

import botocore.exceptions
import lerobot_datasets
import numpy as np
import pytest
from s3_server import FaultProxy, Faults, HttpFileServer

import stoker
from stoker import _core
from stoker.datasets.lerobot.index import remote_index_path
from stoker.datasets.lerobot.metadata import read_columns, read_lerobot_metadata
from stoker.io.storage import S3Options, as_s3_options, is_url, join, open_dataset_root

CAMERAS = ("observation.images.top", "observation.images.wrist")
BUCKET = "stoker-data"


# ---------------------------------------------------------------------------------------------
# Fixtures: two tiny datasets (2 episodes, 2 cameras, 64x48 H.264), uploaded once.


@pytest.fixture(scope="session")
def tiny(tmp_path_factory, lerobot_cache):
    root = tmp_path_factory.mktemp("tiny")
    common = dict(cameras=CAMERAS, fps=30, codec="h264", size=(48, 64), cache_dir=lerobot_cache)
    return {
        "v21": lerobot_datasets.write_v21(root / "v21", [3, 4], **common),
        "v30": lerobot_datasets.write_v30(root / "v30", [3, 4], episodes_per_file=2, **common),
    }


@pytest.fixture(scope="session")
def s3(s3_server, tiny):
    """The server with both datasets uploaded to s3://stoker-data/ds/<version>."""
    s3_server.create_bucket(BUCKET)
    for version, written in tiny.items():
        s3_server.upload_tree(written.root, BUCKET, f"ds/{version}")
    return s3_server


@pytest.fixture
def s3_env(s3, s3_environment):
    """The environment pointing at the server (with both datasets) and a private cache."""
    return s3


def url(version):
    return f"s3://{BUCKET}/ds/{version}"


def local_to_url(path, written, version):
    return url(version) + "/" + os.path.relpath(str(path), written.root).replace(os.sep, "/")


# ---------------------------------------------------------------------------------------------
# Options


def test_storage_options_take_fsspec_and_s3fs_spellings():
    options = as_s3_options(
        {
            "key": "AK",
            "secret": "SK",
            "token": "TK",
            "anon": False,
            "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-3"},
            "max_attempts": 3,
        }
    )
    assert options == S3Options(
        access_key_id="AK",
        secret_access_key="SK",
        session_token="TK",
        endpoint_url="http://127.0.0.1:9000",
        region="eu-west-3",
        max_attempts=3,
    )
    assert as_s3_options({"endpoint_url": "https://s3.example", "region": "r"}) == S3Options(
        endpoint_url="https://s3.example", region="r"
    )
    assert as_s3_options(None) == S3Options()
    assert as_s3_options(options) is options


def test_unknown_or_conflicting_storage_options_are_refused_by_name():
    with pytest.raises(stoker.InvalidArgumentError, match="'use_ssl'"):
        as_s3_options({"key": "AK", "use_ssl": False})
    with pytest.raises(stoker.InvalidArgumentError, match=r"client_kwargs\['verify'\]"):
        as_s3_options({"client_kwargs": {"verify": False}})
    with pytest.raises(stoker.InvalidArgumentError, match="twice"):
        as_s3_options({"key": "A", "access_key_id": "B"})
    with pytest.raises(stoker.InvalidArgumentError, match="max_attempts"):
        as_s3_options({"max_attempts": "3"})
    with pytest.raises(stoker.InvalidArgumentError, match="endpoint_url"):
        S3Options(endpoint_url="127.0.0.1:9000")


def test_options_repr_leaves_secrets_out():
    text = repr(S3Options(access_key_id="AK", secret_access_key="hush", session_token="quiet"))
    assert "AK" in text and "hush" not in text and "quiet" not in text


def test_options_resolve_from_the_environment_and_profiles(monkeypatch, tmp_path):
    credentials = tmp_path / "credentials"
    credentials.write_text("[work]\naws_access_key_id = PK\naws_secret_access_key = PS\n")
    config = tmp_path / "config"
    config.write_text("[profile work]\nregion = ap-south-1\n")
    for name in (
        "AWS_PROFILE",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL_S3",
        "AWS_SESSION_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "EK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ES")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    env = S3Options().resolved()
    assert (env.access_key_id, env.secret_access_key) == ("EK", "ES")
    assert env.endpoint_url == "http://127.0.0.1:1" and env.region == "us-east-1"
    # A profile named explicitly wins over the environment's keys, as in the AWS CLI.
    work = S3Options(profile="work").resolved()
    assert (work.access_key_id, work.secret_access_key, work.region) == ("PK", "PS", "ap-south-1")
    # Explicit fields win over everything.
    explicit = S3Options(
        profile="work",
        access_key_id="XK",
        secret_access_key="XS",
        region="sa-east-1",
        endpoint_url="http://h:2",
    ).resolved()
    assert (explicit.access_key_id, explicit.region, explicit.endpoint_url) == (
        "XK",
        "sa-east-1",
        "http://h:2",
    )


def test_urls_and_joins():
    assert is_url("s3://b/k") and is_url("HTTPS://h/p") and is_url("http://h")
    assert not is_url("/data/s3:/x") and not is_url(b"s3://b") and not is_url("file.mp4")
    assert join("s3://b/ds/", "meta", "info.json") == "s3://b/ds/meta/info.json"
    assert join("https://h/v.mp4?X-Sig=1", "x") == "https://h/v.mp4/x?X-Sig=1"
    assert join("/data/ds", "meta") == os.path.join("/data/ds", "meta")


def test_storage_options_are_refused_for_a_local_folder(tiny):
    with pytest.raises(stoker.InvalidArgumentError, match="remote"):
        read_lerobot_metadata(tiny["v21"].root, {"key": "AK"})


# ---------------------------------------------------------------------------------------------
# The server and its errors


def test_the_server_checks_signatures(s3):
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        s3.client(secret="not-the-secret").head_bucket(Bucket=BUCKET)
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        s3.client(secret="not-the-secret").get_object(Bucket=BUCKET, Key="ds/v21/meta/info.json")
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


def test_refused_credentials_are_named_with_the_url(s3_env):
    with pytest.raises(stoker.DatasetError) as raised:
        read_lerobot_metadata(url("v21"), {"secret": "not-the-secret", "max_attempts": 1})
    message = str(raised.value)
    assert f"{url('v21')}/meta/info.json" in message and "refused the credentials" in message


def test_a_missing_bucket_is_named(s3_env):
    with pytest.raises(stoker.DatasetError) as raised:
        read_lerobot_metadata("s3://no-such-bucket/ds")
    assert "bucket 'no-such-bucket' does not exist" in str(raised.value)


def test_a_missing_key_is_named(s3_env):
    with pytest.raises(stoker.DatasetError, match=f"missing meta file {url('nowhere')}/meta/info"):
        read_lerobot_metadata(url("nowhere"))


# ---------------------------------------------------------------------------------------------
# Metadata over S3 and HTTP equal to the local copy's


def check_same_metadata(remote, local, written, version):
    to_url = np.vectorize(lambda p: local_to_url(p, written, version))
    assert remote.root == url(version) if remote.root.startswith("s3") else True
    for name in (
        "codebase_version",
        "fps",
        "cameras",
        "features",
        "chunks_size",
        "info",
        "num_episodes",
        "num_frames",
    ):
        assert getattr(remote, name) == getattr(local, name), name
    for name in (
        "tasks",
        "episode_index",
        "length",
        "dataset_from_index",
        "dataset_to_index",
        "task_index",
        "episode_data_file",
        "data_file_from_index",
        "data_file_to_index",
    ):
        np.testing.assert_array_equal(getattr(remote, name), getattr(local, name), err_msg=name)
    assert list(remote.data_files) == [
        remote.source.url(os.path.relpath(p, written.root)) for p in local.data_files
    ]
    for camera in local.cameras:
        r, l = remote.videos[camera], local.videos[camera]
        assert list(r.files) == [
            remote.source.url(os.path.relpath(p, written.root)) for p in l.files
        ]
        np.testing.assert_array_equal(r.file_index, l.file_index)
        np.testing.assert_array_equal(r.from_timestamp, l.from_timestamp)
        np.testing.assert_array_equal(r.to_timestamp, l.to_timestamp)
    if remote.root.startswith("s3://"):
        assert list(remote.data_files) == list(to_url(local.data_files))


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_metadata_over_s3_equals_the_local_copy(s3_env, tiny, version):
    written = tiny[version]
    local = read_lerobot_metadata(written.root)
    remote = read_lerobot_metadata(url(version))
    check_same_metadata(remote, local, written, version)
    names = ["observation.state", "action", "timestamp", "frame_index", "index"]
    for name, values in read_columns(local, names).items():
        np.testing.assert_array_equal(read_columns(remote, names)[name], values)


def test_parquet_reads_refuse_a_column_the_file_lacks_locally_and_over_s3(s3_env, tiny):
    # Read through pyarrow's ParquetFile (not read_table, which imports pyarrow.dataset and
    # pandas), and refused naming the file and the columns it lacks.
    written = tiny["v21"]
    member = os.path.relpath(written.data_paths[0], written.root)
    for root in (open_dataset_root(written.root), open_dataset_root(url("v21"))):
        table = root.read_parquet(member, "data file", columns=["index", "timestamp"])
        assert table.column_names == ["index", "timestamp"] and table.num_rows == 3
        assert root.read_parquet(member, "data file").num_rows == 3
        lacks = f"data file {root.url(member)} lacks the columns \\['no_such_column'\\]"
        with pytest.raises(stoker.DatasetError, match=lacks):
            root.read_parquet(member, "data file", columns=["index", "no_such_column"])


def test_explicit_options_reach_the_store_without_the_environment(s3, tiny, monkeypatch):
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    options = {
        "key": s3.access_key_id,
        "secret": s3.secret_access_key,
        "client_kwargs": {"endpoint_url": s3.endpoint, "region_name": "us-east-1"},
    }
    remote = read_lerobot_metadata(url("v30"), options)
    assert remote.num_frames == sum(tiny["v30"].lengths)


@pytest.fixture(scope="module")
def http_root(tiny):
    """The datasets' parent folder served over plain HTTP (no listing used)."""
    folder = os.path.dirname(tiny["v21"].root)
    handler = functools.partial(QuietHandler, directory=folder)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_metadata_over_http_equals_the_local_copy(http_root, tiny, version):
    written = tiny[version]
    remote = read_lerobot_metadata(f"{http_root}/{version}")
    check_same_metadata(remote, read_lerobot_metadata(written.root), written, version)
    with pytest.raises(stoker.DatasetError, match="enumerable from its metadata"):
        remote.source.glob("meta")


# ---------------------------------------------------------------------------------------------
# The index cache of remote datasets


def test_the_remote_index_key_follows_the_meta_files_not_the_videos(s3_env, tiny, tmp_path):
    """The key is the meta files' versions (one listing of meta/, whatever the number of
    videos): a meta file uploaded again gives a new key, a video uploaded again does not (its
    reads are refused instead: the test below)."""
    written = tiny["v30"]
    source = open_dataset_root(url("v30"))
    first = remote_index_path(source, "v3.0", str(tmp_path))
    assert first.startswith(os.path.join(str(tmp_path), "index", "v30-"))
    assert remote_index_path(source, "v3.0", str(tmp_path)) == first  # nothing changed
    video = written.video_paths[CAMERAS[1]][0]
    video_key = f"ds/v30/{os.path.relpath(video, written.root)}"
    tasks = os.path.join(written.root, "meta", "tasks.parquet")
    tasks_key = "ds/v30/meta/tasks.parquet"
    try:
        with open(video, "rb") as f:
            s3_env.put(BUCKET, video_key, f.read() + b"\0")
        assert remote_index_path(open_dataset_root(url("v30")), "v3.0", str(tmp_path)) == first
        with open(tasks, "rb") as f:
            s3_env.put(BUCKET, tasks_key, f.read() + b"\0")  # a new version of a meta file
        # A root is one look at the store (one listing per folder): the old root still sees
        # what it listed, a root opened again sees the new version.
        assert remote_index_path(source, "v3.0", str(tmp_path)) == first
        second = remote_index_path(open_dataset_root(url("v30")), "v3.0", str(tmp_path))
        assert second != first and os.path.dirname(second) == os.path.dirname(first)
    finally:
        s3_env.s3.upload_file(video, BUCKET, video_key)
        s3_env.s3.upload_file(tasks, BUCKET, tasks_key)
    # Restored bytes: the same size and ETag (S3's ETag of a single-part upload is its MD5).
    assert remote_index_path(open_dataset_root(url("v30")), "v3.0", str(tmp_path)) == first


# A fresh process (a rank) opening a dataset and reading every sample, printing the first
# error: argv[1] the URL, argv[2] "rebuild" to rebuild the index.
READ_ALL = """
import sys
import stoker
dataset = stoker.LeRobotDataset(sys.argv[1], progress=False, rebuild=sys.argv[2] == "rebuild")
try:
    for i in range(len(dataset)):
        dataset[i]
except stoker.Error as error:
    print(error)
    sys.exit(3)
"""


def test_a_video_rewritten_under_unchanged_meta_files_is_refused_by_name(s3_env, tiny):
    """A warm open trusts its index while the meta files are unchanged, and reads each video
    with the ETag the index recorded: a video rewritten in place since is refused by name as
    changed, never decoded against a stale index; rebuild=True indexes it again."""
    import subprocess
    import sys

    written = tiny["v21"]
    prefix = "ds/v21-rewritten"
    s3_env.upload_tree(written.root, BUCKET, prefix)
    dataset = f"s3://{BUCKET}/{prefix}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(["python", os.environ.get("PYTHONPATH", "")])}

    def read_all(how):
        return subprocess.run(
            [sys.executable, "-c", READ_ALL, dataset, how], env=env, capture_output=True, text=True
        )

    assert read_all("cold").returncode == 0  # builds the index
    video = written.video_paths[CAMERAS[0]][0]
    key = f"{prefix}/{os.path.relpath(video, written.root)}"
    with open(video, "rb") as f:
        s3_env.put(BUCKET, key, f.read() + b"\0")  # the same frames, another version
    refused = read_all("warm")
    assert refused.returncode == 3, refused.stderr
    assert f"s3://{BUCKET}/{key}" in refused.stdout and "changed" in refused.stdout, refused.stdout
    rebuilt = read_all("rebuild")
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert read_all("warm").returncode == 0  # the new index, current again


# ---------------------------------------------------------------------------------------------
# Items, videos, loaders and faults.


def spec():
    return stoker.WindowSpec(delta_timestamps={CAMERAS[0]: [-1 / 30, 0.0], "action": [0.0, 1 / 30]})


def same_items(a, b):
    assert a.keys() == b.keys()
    for name in a:
        if isinstance(a[name], np.ndarray):
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        else:
            assert a[name] == b[name], name


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_items_over_s3_equal_the_local_copy(s3_env, tiny, version):
    local = stoker.LeRobotDataset(tiny[version].root, spec(), progress=False, output="numpy")
    remote = stoker.LeRobotDataset(url(version), spec(), progress=False, output="numpy")
    assert len(remote) == len(local)
    for i in range(len(local)):
        same_items(remote[i], local[i])
    assert all(f.startswith(url(version) + "/") for f in remote.index.video_files)
    again = stoker.LeRobotDataset(url(version), spec(), progress=False, output="numpy")
    assert again.index.report is None  # the cached index, mapped
    child = pickle.loads(pickle.dumps(remote))
    same_items(child[len(local) - 1], local[len(local) - 1])


def test_remote_indexes_of_different_cameras_live_side_by_side(s3_env, tiny):
    """The index of one camera and the full one are cached apart, and building one does not
    remove the other (only older versions of the same cameras' index go)."""
    window = stoker.WindowSpec(delta_timestamps={CAMERAS[0]: [0.0]})
    top = stoker.LeRobotDataset(url("v30"), window, cameras=[CAMERAS[0]], progress=False, output="numpy")
    every = stoker.LeRobotDataset(url("v30"), window, progress=False, output="numpy")
    assert top.cameras == (CAMERAS[0],) and every.cameras == CAMERAS
    assert top.index.path != every.index.path
    assert os.path.dirname(top.index.path) == os.path.dirname(every.index.path)
    again = stoker.LeRobotDataset(url("v30"), window, cameras=[CAMERAS[0]], progress=False, output="numpy")
    assert again.index.report is None and again.index.path == top.index.path
    local = stoker.LeRobotDataset(tiny["v30"].root, window, cameras=[CAMERAS[0]], progress=False, output="numpy")
    same_items(again[3], local[3])


def test_explicit_options_reach_the_videos(s3, tiny, monkeypatch):
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    options = stoker.S3Options(
        access_key_id=s3.access_key_id,
        secret_access_key=s3.secret_access_key,
        endpoint_url=s3.endpoint,
        region="us-east-1",
    )
    ds = stoker.LeRobotDataset(
        url("v21"),
        spec(),
        storage_options=options,
        progress=False,
        cache_dir=str(os.path.join(os.path.dirname(tiny["v21"].root), "cache-explicit")), output="numpy"
    )
    local = stoker.LeRobotDataset(tiny["v21"].root, spec(), progress=False, output="numpy")
    same_items(ds[2], local[2])
    same_items(pickle.loads(pickle.dumps(ds))[5], local[5])


# Presigned URLs are served by HttpFileServer: moto 5.2.5 with signature checking on answers
# every presigned request (SigV2 or SigV4, GET or HEAD) with 500.
def test_video_reader_over_s3_and_plain_https(s3_env, tiny):
    path = tiny["v21"].video_paths[CAMERAS[0]][1]
    relative = os.path.relpath(path, tiny["v21"].root)
    key = f"ds/v21/{relative}"
    local = stoker.VideoReader(path)
    expected = local.get_frames(range(len(local)))
    with HttpFileServer(tiny["v21"].root) as web:
        # A URL with a query string, as a presigned one has.
        for source in (f"s3://{BUCKET}/{key}", f"{web.url}/{relative}?expires={time.time() + 600}"):
            reader = stoker.VideoReader(source)
            np.testing.assert_array_equal(reader.get_frames(range(len(reader))), expected)
            np.testing.assert_array_equal(reader.pts, local.pts)
    reader = stoker.VideoReader(f"s3://{BUCKET}/{key}", storage_options={"max_attempts": 2})
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(reader)).get_frames([0]), expected[:1])


def test_an_expired_url_and_a_missing_video_are_refused_plainly(s3_env, tiny):
    relative = os.path.relpath(tiny["v21"].video_paths[CAMERAS[0]][0], tiny["v21"].root)
    with HttpFileServer(tiny["v21"].root) as web:
        expired = f"{web.url}/{relative}?expires={time.time() - 1}"
        with pytest.raises(stoker.AccessDeniedError, match="expired") as raised:
            stoker.VideoReader(expired)
        assert web.url in str(raised.value) and "403" in str(raised.value)
        with pytest.raises(stoker.Error, match="404") as raised:
            stoker.VideoReader(f"{web.url}/videos/nothing.mp4")
        assert "videos/nothing.mp4" in str(raised.value)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_loader_over_s3_gives_the_local_batches(s3_env, tiny, threads):
    local = stoker.LeRobotDataset(tiny["v30"].root, spec(), progress=False, output="numpy")
    remote = stoker.LeRobotDataset(url("v30"), spec(), progress=False, output="numpy")
    a = list(stoker.Loader(local, batch_size=3, seed=1, threads=threads, output="numpy"))
    loader = stoker.Loader(remote, batch_size=3, seed=1, threads=threads, output="numpy")
    b = list(loader)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        same_items(dict(x), dict(y))
    # Every packet read went through the range cache, counted in the loader's stats.
    remote_reads = loader.stats()["remote"]
    assert remote_reads["cache_hits"] + remote_reads["cache_misses"] > 0
    assert remote_reads["failures"] == 0


def test_a_dataset_naming_a_missing_video_is_refused_by_name(s3_env, tiny):
    written = tiny["v21"]
    prefix = "ds/v21-missing-video"
    s3_env.upload_tree(written.root, BUCKET, prefix)
    key = f"{prefix}/{os.path.relpath(written.video_paths[CAMERAS[1]][0], written.root)}"
    s3_env.s3.delete_object(Bucket=BUCKET, Key=key)
    with pytest.raises(stoker.Error) as raised:
        stoker.LeRobotDataset(f"s3://{BUCKET}/{prefix}", spec(), progress=False, output="numpy")
    assert f"s3://{BUCKET}/{key}" in str(raised.value)


@pytest.fixture
def proxy(s3, fault_proxy):
    """A FaultProxy in front of the server (with both datasets), the environment pointing at
    it."""
    return fault_proxy


@pytest.fixture(scope="module")
def many_episodes(tmp_path_factory, lerobot_cache, s3):
    """A v2.1 dataset of 30 two-frame episodes (93 objects) at s3://stoker-data/ds/many."""
    written = lerobot_datasets.write_v21(
        tmp_path_factory.mktemp("many") / "many", [2] * 30, CAMERAS, fps=30, codec="h264",
        size=(48, 64), cache_dir=lerobot_cache,
    )
    s3.upload_tree(written.root, BUCKET, "ds/many")
    return written


def opening_requests(proxy, dataset_url):
    """The requests, by method, that opening the dataset at ``dataset_url`` sends, and the
    prefixes it listed."""
    proxy.methods.clear()
    proxy.log.clear()
    stoker.LeRobotDataset(dataset_url, spec(), progress=False, output="numpy")
    listed = [
        urllib.parse.parse_qs(urllib.parse.urlsplit(path).query).get("prefix", [""])[0]
        for method, path in proxy.log
        if "list-type=" in path
    ]
    return dict(proxy.methods), listed


def test_a_warm_open_sends_a_few_requests_whatever_the_object_count(proxy, many_episodes):
    """A warm open keys its index on the meta files (one listing of meta/) and takes the
    videos' and data files' versions from the index: nothing it sends grows with the objects
    (a warm open of 123 objects sent 257 requests, a HEAD each; at 10^4 objects one listing
    request per 1,000 of them)."""
    for dataset in (url("v21"), "s3://stoker-data/ds/many"):
        opening_requests(proxy, dataset)  # cold: builds the index
    few, few_listed = opening_requests(proxy, url("v21"))  # 9 objects
    many, many_listed = opening_requests(proxy, "s3://stoker-data/ds/many")  # 93 objects
    assert few == many
    assert sum(many.values()) <= 16, many
    assert many.get("HEAD", 0) <= 4, many  # the meta files pyarrow reads; no object's own
    assert few_listed == ["ds/v21/meta/"] and many_listed == ["ds/many/meta/"], many_listed


def test_a_remote_schema_is_read_from_the_footer(s3, proxy, tmp_path):
    """Every open asks the first data file's schema; a v3.0 data file runs to hundreds of MB:
    ranged reads of its footer, not the whole file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "big.parquet"
    rows = 1_000_000
    pq.write_table(pa.table({"x": np.random.default_rng(0).random(rows)}), path)
    assert path.stat().st_size > 4_000_000
    s3.s3.upload_file(str(path), BUCKET, "ds/footer/data/big.parquet")
    root = open_dataset_root(f"s3://{BUCKET}/ds/footer")
    sent = proxy.bytes_sent
    assert root.read_schema("data/big.parquet").names == ["x"]
    assert proxy.bytes_sent - sent < 200_000, proxy.bytes_sent - sent


# A fresh process opening a dataset whose index is cached, then (with "read") reading every
# sample: what a rank of a job does.
WARM_PROCESS = """
import sys
import stoker
dataset = stoker.LeRobotDataset(sys.argv[1], progress=False)
if sys.argv[2] == "read":
    for i in range(len(dataset)):
        dataset[i]
"""


def test_a_warm_open_reads_its_videos_without_a_head_each(proxy, many_episodes):
    """The listing gave every video's size and ETag: reading them sends GETs only (the first
    batch of a 10^4-object dataset sent a HEAD per video, 63 of its 127 requests)."""
    import subprocess
    import sys

    dataset = "s3://stoker-data/ds/many"
    stoker.LeRobotDataset(dataset, spec(), progress=False, output="numpy")  # cold: builds the index
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(["python", os.environ.get("PYTHONPATH", "")])}

    def requests(what):
        proxy.methods.clear()
        subprocess.run([sys.executable, "-c", WARM_PROCESS, dataset, what], env=env, check=True)
        return dict(proxy.methods)

    opened, read = requests("open"), requests("read")
    assert read.get("HEAD", 0) == opened.get("HEAD", 0) <= 4, (opened, read)
    assert read["GET"] >= opened["GET"] + 30, (opened, read)  # the videos were read


def test_where_listing_is_refused_objects_are_asked_one_by_one(proxy, tiny):
    """Credentials that may get objects but not list them: the dataset still opens, its
    versions learned by a HEAD per object, and reads the same items."""
    proxy.set_faults(deny_listing=True)
    local = stoker.LeRobotDataset(tiny["v21"].root, spec(), progress=False, output="numpy")
    remote = stoker.LeRobotDataset(url("v21"), spec(), progress=False, output="numpy")  # v3.0 needs a listing
    assert proxy.faults_injected.get("denied", 0) >= 1
    assert proxy.methods["HEAD"] >= 6  # every video and data file, one by one
    for i in range(len(local)):
        same_items(remote[i], local[i])


def test_items_survive_faults_and_retries_are_counted(proxy, tiny):
    local = stoker.LeRobotDataset(tiny["v21"].root, spec(), progress=False, output="numpy")
    options = {
        "max_attempts": 10,
        "backoff_base_s": 0.001,
        "backoff_max_s": 0.01,
        "low_speed_timeout_s": 1,
        "min_request_bytes": 1024,
    }
    before = _core.remote_stats()
    proxy.set_faults(
        Faults(slowdown=0.15, error=0.05, reset=0.05, truncate=0.05, stall=0.02, stall_s=0.2)
    )
    remote = stoker.LeRobotDataset(url("v21"), spec(), storage_options=options, progress=False, output="numpy")
    for i in range(len(local)):
        same_items(remote[i], local[i])
    after = _core.remote_stats()
    assert sum(proxy.faults_injected.values()) > 0
    assert after["retries"] > before["retries"]


def test_a_store_that_never_recovers_fails_plainly_in_time(proxy, tiny):
    proxy.set_faults(down=True)
    key = f"ds/v21/{os.path.relpath(tiny['v21'].video_paths[CAMERAS[0]][0], tiny['v21'].root)}"
    started = time.monotonic()
    with pytest.raises(stoker.Error) as raised:
        stoker.VideoReader(
            f"s3://{BUCKET}/{key}",
            storage_options={
                "max_attempts": 3,
                "total_timeout_s": 3,
                "backoff_base_s": 0.01,
                "backoff_max_s": 0.05,
            },
        )
    assert time.monotonic() - started < 6
    assert f"s3://{BUCKET}/{key}" in str(raised.value) and "503" in str(raised.value)


def test_skip_and_raise_over_s3(s3_env, tiny, tmp_path):
    """A video whose packets are damaged in the store (its header intact, so it indexes from
    the header alone): raise names it; on_error="skip" replaces its samples."""
    written = tiny["v21"]
    prefix = "ds/v21-broken"
    s3_env.upload_tree(written.root, BUCKET, prefix)
    video = written.video_paths[CAMERAS[0]][1]
    key = f"{prefix}/{os.path.relpath(video, written.root)}"
    with open(video, "rb") as f:
        damaged = bytearray(f.read())
    # Every packet's bytes zeroed where they lie; the header (moov) stays.
    packets = stoker.VideoReader(video).packet_bytes()
    assert packets
    for offset, size in packets:
        damaged[offset : offset + size] = bytes(size)
    s3_env.put(BUCKET, key, bytes(damaged))
    ds = stoker.LeRobotDataset(f"s3://{BUCKET}/{prefix}", spec(), progress=False, output="numpy")
    with pytest.raises(stoker.Error) as raised:
        for _ in stoker.Loader(ds, batch_size=2, seed=0, threads=2):
            pass
    assert f"s3://{BUCKET}/{key}" in str(raised.value)
    loader = stoker.Loader(ds, batch_size=2, seed=0, threads=2, on_error="skip")
    rows = np.concatenate([b["index"] for b in loader])
    assert not set(rows.tolist()) & set(range(3, 7))
    assert loader.stats()["skipped"] >= 4


# ---------------------------------------------------------------------------------------------
# Objects replaced while open, requests for the wrong region


def test_a_video_replaced_behind_a_server_ignoring_if_match_fails_as_changed(video, tmp_path):
    """Issue 21 item 3: HttpFileServer, like many web servers, ignores If-Match; a video
    replaced after it was opened used to be decoded from the new version's bytes."""
    path = video("h264")
    local = stoker.VideoReader(path)
    with open(path, "rb") as f:
        data = f.read()
    replaced = bytearray(data)  # the same size and header, another ETag
    for offset, size in local.packet_bytes():
        replaced[offset : offset + size] = bytes(size)
    served = tmp_path / "web"
    served.mkdir()
    (served / "v.mp4").write_bytes(data)
    with HttpFileServer(str(served)) as web:
        url = f"{web.url}/v.mp4"
        # Small requests: the packets are fetched when decoded, not with the header.
        reader = stoker.VideoReader(url, storage_options={"min_request_bytes": 4096})
        (served / "v.mp4").write_bytes(bytes(replaced))
        with pytest.raises(stoker.DecodeError) as raised:
            reader.get_frames(range(len(reader)))
    message = str(raised.value)
    assert url in message and "the object changed since it was opened (ETag" in message


class WrongRegionS3(http.server.BaseHTTPRequestHandler):
    """What S3 answers requests signed for us-east-1 of a bucket in eu-west-1: 400 with the
    bucket's region in a header, and (not to HEAD) AuthorizationHeaderMalformed."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = (
            b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AuthorizationHeaderMalformed'
            b"</Code><Message>The authorization header is malformed; the region &apos;us-east-1"
            b"&apos; is wrong; expecting &apos;eu-west-1&apos;</Message><Region>eu-west-1"
            b"</Region><RequestId>test</RequestId></Error>"
        )
        self.send_response(400)
        self.send_header("x-amz-bucket-region", "eu-west-1")
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


def test_a_wrong_region_is_named_with_the_buckets_region():
    """Issue 21 item 18: the error said only 'HEAD failed ... HTTP 400'."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), WrongRegionS3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    options = stoker.S3Options(
        endpoint_url=f"http://127.0.0.1:{server.server_address[1]}",
        region="us-east-1",
        access_key_id="AK",
        secret_access_key="SK",
        max_attempts=1,
    )
    try:
        with pytest.raises(stoker.InvalidArgumentError) as raised:
            stoker.VideoReader("s3://bucket/v.mp4", storage_options=options)
    finally:
        server.shutdown()
        server.server_close()
    message = str(raised.value)
    assert "s3://bucket/v.mp4" in message and "HTTP 400 AuthorizationHeaderMalformed" in message
    assert "the region 'us-east-1' is wrong" in message
    assert (
        "the bucket is in region eu-west-1, the request was signed for us-east-1: "
        "set region=eu-west-1 (S3Options) or AWS_REGION" in message
    )


# ---------------------------------------------------------------------------------------------
# Command line


def test_etl_and_doctor_take_the_aws_cli_flags():
    import argparse

    from stoker.doctor import command
    from stoker.io.storage import storage_options_from_args
    from stoker.writers import etl

    for module in (etl, command):
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        extra = ["--size", "64x48"] if module is etl else []
        positional = ["s3://b/src", "dst"] if module is etl else ["s3://b/ds"]
        args = parser.parse_args(
            positional
            + extra
            + ["--endpoint-url", "http://127.0.0.1:9", "--profile", "work", "--region", "r"]
        )
        assert storage_options_from_args(args) == S3Options(
            endpoint_url="http://127.0.0.1:9", profile="work", region="r"
        )
        assert storage_options_from_args(parser.parse_args(positional + extra)) is None


def test_etl_from_s3_equals_etl_from_the_local_copy(s3_env, tiny, tmp_path):
    from stoker.writers.etl import materialize

    local = materialize(
        tiny["v21"].root, str(tmp_path / "local"), size=(32, 48), progress=False, workers=1
    )
    remote = materialize(
        url("v21"), str(tmp_path / "remote"), size=(32, 48), progress=False, workers=1
    )
    assert remote.source == url("v21") and local.episode_map == remote.episode_map
    assert local.bytes_in == remote.bytes_in and remote.verified
    a = stoker.LeRobotDataset(str(tmp_path / "local"), spec(), progress=False, output="numpy")
    b = stoker.LeRobotDataset(str(tmp_path / "remote"), spec(), progress=False, output="numpy")
    for i in range(len(a)):
        same_items(a[i], b[i])


# ---------------------------------------------------------------------------------------------
# The fault proxy itself


def test_the_fault_proxy_forwards_signed_requests_and_injects_faults(s3, tiny):
    key = "ds/v21/meta/info.json"
    with open(os.path.join(tiny["v21"].root, "meta", "info.json"), "rb") as f:
        expected = f.read()

    def fetch(proxy):  # boto3 signs for the proxy's host, which the proxy passes on as is
        body = s3.client(endpoint=proxy.endpoint).get_object(Bucket=BUCKET, Key=key)["Body"]
        return body.read()

    with FaultProxy(s3.endpoint, seed=3) as proxy:
        assert fetch(proxy) == expected
        proxy.set_faults(on_request={proxy.requests + 1: "slowdown"})
        with pytest.raises(botocore.exceptions.ClientError) as raised:
            fetch(proxy)
        assert raised.value.response["Error"]["Code"] == "SlowDown"
        for fault in ("truncate", "reset"):
            proxy.set_faults(on_request={proxy.requests + 1: fault})
            with pytest.raises(Exception, match="(?i)read|reset|connection|length"):
                fetch(proxy)
        proxy.set_faults(on_request={proxy.requests + 1: "stall"}, stall_s=0.3)
        started = time.monotonic()
        assert fetch(proxy) == expected and time.monotonic() - started >= 0.3
        assert proxy.faults_injected == {"slowdown": 1, "truncate": 1, "reset": 1, "stall": 1}

    counts = []
    for _ in range(2):  # the same seed, the same faults
        with FaultProxy(s3.endpoint, seed=11, faults=Faults(slowdown=0.3, error=0.2)) as proxy:
            for _ in range(12):
                try:
                    fetch(proxy)
                except botocore.exceptions.ClientError:
                    pass
            counts.append(dict(proxy.faults_injected))
    assert counts[0] == counts[1] and sum(counts[0].values()) > 0
