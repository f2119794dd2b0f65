"""The native shard index against shards that lie: foreign, stale or old sidecars, shards
replaced, rewritten, truncated or deleted during an epoch (issue 21, items 1, 2, 6 and 10).
Every sample delivered must be the one its key names: each caption here says its key."""

import os
import shutil
import tarfile
import warnings

import numpy as np
import pytest

import stoker
from stoker import _core

SPEC = {"caption": stoker.Text("txt"), "label": stoker.Label("cls")}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))


def source_folder(folder, keys):
    """A folder of samples for `stoker shard`: <key>.txt says the key, <key>.cls its number."""
    folder.mkdir(parents=True, exist_ok=True)
    for n, key in enumerate(keys):
        (folder / f"{key}.txt").write_text(f"caption of {key}")
        (folder / f"{key}.cls").write_text(str(n % 7))
    return folder


def written(tmp_path, name, keys, shard_bytes=30_000):
    dst = tmp_path / name
    stoker.write_shards(
        source_folder(tmp_path / f"{name}-src", keys),
        dst,
        shard_bytes=shard_bytes,
        shuffle_seed=None,
        progress=False,
    )
    return dst, sorted(str(p) for p in dst.glob("shard-*.tar"))


def write_tar(path, keys, reverse=False):
    """A shard of `keys` (a .txt and a .cls each), written with Python's tarfile."""
    with tarfile.open(path, "w") as tar:
        for key in reversed(keys) if reverse else keys:
            for field, data in (("txt", f"caption of {key}"), ("cls", "1")):
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data.encode())
                tar.addfile(info, __import__("io").BytesIO(data.encode()))
    return str(path)


def delivered(loader):
    """(key, caption) of every sample of one epoch."""
    out = []
    for batch in loader:
        out.extend(zip(batch["__key__"], batch["caption"]))
    return out


def delivered_around(loader, change, pairs=None):
    """(key, caption) of one epoch of ``loader``, calling ``change()`` after its first batch;
    appended to ``pairs`` as they come when given (what was delivered before an error)."""
    pairs = [] if pairs is None else pairs
    iterator = iter(loader)
    first = next(iterator)
    pairs.extend(zip(first["__key__"], first["caption"]))
    change()
    for batch in iterator:
        pairs.extend(zip(batch["__key__"], batch["caption"]))
    return pairs


def assert_replaced(pairs, readable, replaced):
    """The epoch's slots: the ``readable`` keys in order, then ``replaced`` slots holding
    replacements drawn from the readable keys (on_error="skip" keeps every batch whole)."""
    assert [k for k, _ in pairs[: len(readable)]] == readable
    assert len(pairs) == len(readable) + replaced
    assert {k for k, _ in pairs[len(readable) :]} <= set(readable)


def assert_right(pairs):
    wrong = [(k, c) for k, c in pairs if c != f"caption of {k}"]
    assert not wrong, f"{len(wrong)} samples under wrong keys, e.g. {wrong[:3]}"


# --- item 1: a sidecar is bound to its shard's content -------------------------------------


def test_a_sidecar_of_another_shard_of_the_same_size_is_refused(tmp_path, cache):
    keys = [f"k{i:03d}" for i in range(60)]
    dst, shards = written(tmp_path, "foreign", keys, shard_bytes=20_000)
    assert len(shards) >= 2
    sizes = {os.path.getsize(s) for s in shards[:2]}
    assert len(sizes) == 1, "tar's 10 KiB records make neighbouring shards equal in size"
    shutil.copy(shards[1] + ".index", shards[0] + ".index")
    with pytest.warns(UserWarning, match="did not match their shard"):
        ds = stoker.ShardDataset(shards, SPEC)
    pairs = delivered(stoker.Loader(ds, batch_size=8, shuffle=False))
    assert_right(pairs)
    assert sorted(k for k, _ in pairs) == keys


def test_a_rewritten_shard_with_its_old_sidecar_is_scanned_again(tmp_path, cache):
    keys = [f"r{i:03d}" for i in range(30)]
    path = write_tar(tmp_path / "shard.tar", keys)
    _core.write_shard_sidecar(path)
    before = os.path.getsize(path)
    write_tar(tmp_path / "shard.tar", keys, reverse=True)  # same size, samples reversed
    assert os.path.getsize(path) == before
    with pytest.warns(UserWarning, match="did not match"):
        ds = stoker.ShardDataset(path, SPEC)
    assert ds.keys == keys[::-1]
    assert_right(delivered(stoker.Loader(ds, batch_size=7, shuffle=False)))


def test_a_json_sidecar_of_earlier_stokers_is_refused_and_the_shard_scanned(tmp_path, cache):
    keys = [f"j{i}" for i in range(5)]
    path = write_tar(tmp_path / "old.tar", keys)
    (tmp_path / "old.tar.index").write_text('{"format": "stoker-shard-index", "version": 1}')
    with pytest.warns(UserWarning, match="not a usable shard index"):
        ds = stoker.ShardDataset(path, SPEC)
    assert ds.keys == keys


def test_a_damaged_cache_file_is_rebuilt(tmp_path, cache):
    keys = [f"c{i}" for i in range(9)]
    path = write_tar(tmp_path / "cached.tar", keys)
    assert stoker.ShardDataset(path, SPEC).keys == keys
    files = list((tmp_path / "cache" / "shards").glob("*.sidx"))
    assert len(files) == 1
    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    files[0].write_bytes(bytes(data))
    ds = stoker.ShardDataset(path, SPEC)
    assert ds.keys == keys
    assert_right(delivered(stoker.Loader(ds, batch_size=4, shuffle=False)))


# --- item 2: a shard replaced during an epoch ------------------------------------------------


@pytest.mark.parametrize("how", ["rename over", "rewrite in place"])
def test_a_shard_replaced_during_an_epoch_is_refused_not_misread(tmp_path, cache, how):
    keys = [f"p{i:03d}" for i in range(40)]
    path = write_tar(tmp_path / "live.tar", keys)
    ds = stoker.ShardDataset(path, SPEC)
    replacement = write_tar(tmp_path / "other.tar", keys, reverse=True)
    assert os.path.getsize(replacement) == os.path.getsize(path)

    def replace():
        if how == "rename over":
            os.replace(replacement, path)
        else:
            with open(path, "r+b") as f:
                f.write(open(replacement, "rb").read())

    loader = stoker.Loader(ds, batch_size=8, shuffle=False, prefetch=1, threads=1)
    iterator = iter(loader)
    first = next(iterator)
    replace()
    with pytest.raises(stoker.DatasetError, match="changed since its index was made"):
        for _ in iterator:
            pass
    assert_right(zip(first["__key__"], first["caption"]))

    # Under skip, what can no longer be read as indexed fails its samples, and their
    # replacements, drawn from the same changed shard, fail too: the batch is an error naming
    # it, and nothing wrong comes out before it.
    path = write_tar(tmp_path / "live.tar", keys)
    replacement = write_tar(tmp_path / "other.tar", keys, reverse=True)
    ds = stoker.ShardDataset(path, SPEC)
    loader = stoker.Loader(ds, batch_size=8, shuffle=False, prefetch=1, threads=1, on_error="skip")
    pairs: list = []
    with pytest.raises(stoker.DatasetError, match="changed since its index was made") as raised:
        delivered_around(loader, replace, pairs)
    assert "replacements failed too" in str(raised.value)
    assert 8 <= len(pairs) < 40
    assert_right(pairs)


# --- item 6: truncated and damaged tars -----------------------------------------------------


def cut(path, length):
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:length])


def test_a_truncated_shard_is_refused_under_raise_and_read_up_to_its_damage_under_skip(
    tmp_path, cache
):
    keys = [f"t{i}" for i in range(10)]
    path = write_tar(tmp_path / "cut.tar", keys)
    _core.write_shard_sidecar(path)
    whole = stoker.ShardDataset(path, SPEC)
    boundary = int(whole.field_ranges("txt")[0][6]) - 512  # the header of sample 6
    cut(path, boundary)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the sidecar no longer matches: noted
        ds = stoker.ShardDataset(path, SPEC)
    assert len(ds) == 6
    with pytest.raises(stoker.DatasetError, match=r"cut\.tar.*truncated"):
        stoker.Loader(ds, batch_size=4)
    loader = stoker.Loader(ds, batch_size=4, shuffle=False, on_error="skip")
    pairs = delivered(loader)
    assert_right(pairs)
    assert len(pairs) == 6
    assert "truncated" in loader.stats()["damaged_shards"][0]

    # Mid-header.
    path = write_tar(tmp_path / "mid.tar", keys)
    cut(path, boundary + 200)
    with pytest.raises(stoker.DatasetError, match="mid-header"):
        stoker.Loader(stoker.ShardDataset(path, SPEC), batch_size=4)


def test_an_enlarged_header_size_is_a_corrupt_header_not_fewer_samples(tmp_path, cache):
    keys = [f"e{i}" for i in range(10)]
    path = write_tar(tmp_path / "big.tar", keys)
    ds = stoker.ShardDataset(path, SPEC)
    header = int(ds.field_ranges("txt")[0][3]) - 512
    data = bytearray(open(path, "rb").read())
    data[header + 124 : header + 135] = b"%011o" % 5000  # the size, checksum left as it was
    open(path, "wb").write(bytes(data))
    damaged = stoker.ShardDataset(path, SPEC)
    assert len(damaged) == 3
    with pytest.raises(stoker.DatasetError, match="corrupt tar header at byte"):
        stoker.Loader(damaged, batch_size=4)


# --- item 10: read failures under skip finish the epoch -------------------------------------


def test_a_shard_deleted_mid_epoch_is_skipped_and_counted_under_skip(tmp_path, cache):
    keys = [f"d{i:03d}" for i in range(24)]
    paths = [write_tar(tmp_path / f"del-{s}.tar", keys[s * 8 : (s + 1) * 8]) for s in range(3)]
    ds = stoker.ShardDataset(paths, SPEC)
    loader = stoker.Loader(ds, batch_size=4, shuffle=False, prefetch=1, threads=1, on_error="skip")
    pairs = delivered_around(loader, lambda: os.remove(paths[2]))
    assert_right(pairs)
    assert_replaced(pairs, keys[:16], 8)
    stats = loader.stats()
    assert stats["skipped"] == 8
    assert any("del-2.tar" in e for e in [s["reason"] for s in stats["skips"]])
    # Under raise, the shard is named.
    loader = stoker.Loader(ds, batch_size=4, shuffle=False)
    with pytest.raises(stoker.Error, match="del-2.tar"):
        delivered(loader)


def test_the_writer_leaves_sidecars_the_reader_uses(tmp_path, cache):
    keys = [f"w{i:03d}" for i in range(50)]
    dst, shards = written(tmp_path, "sidecars", keys)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no sidecar refused
        ds = stoker.ShardDataset(shards, SPEC)
    assert sorted(ds.keys) == keys
    assert np.all(ds.labels >= 0)
    assert_right(delivered(stoker.Loader(ds, batch_size=16, shuffle=True, seed=3)))


# --- item 17: shards in object storage are opened in parallel ------------------------------


def test_s3_shards_are_opened_many_at_a_time(tmp_path, fault_proxy, s3_server):
    """28 shards behind 300 ms per request opened one by one took 27 s: the opens (HEAD of the
    shard, its sidecar's HEAD and GET, the header check) now overlap."""
    keys = [f"o{i:03d}" for i in range(24)]
    paths = [
        write_tar(tmp_path / f"shard-{s:06d}.tar", keys[s * 3 : (s + 1) * 3]) for s in range(8)
    ]
    s3_server.create_bucket("open-many")
    for path in paths:
        _core.write_shard_sidecar(path)
        for name in (path, path + ".index"):
            s3_server.s3.upload_file(name, "open-many", f"p/{os.path.basename(name)}")
    fault_proxy.set_faults(latency_s=0.05)
    ds = stoker.ShardDataset("s3://open-many/p/shard-{000000..000007}.tar", SPEC)
    assert ds.keys == keys
    assert fault_proxy.max_in_flight >= 4, fault_proxy.max_in_flight
    assert_right(delivered(stoker.Loader(ds, batch_size=5, shuffle=False)))


def test_an_s3_shard_overwritten_mid_epoch_is_skipped_under_skip_and_named_under_raise(
    tmp_path, s3_environment
):
    """The store refuses the reads of an object replaced since it was opened (412 to If-Match,
    or another ETag): under skip those samples are skipped and named and the epoch finishes.
    (With the range cache on, these small shards would be read from what their scan fetched:
    the version that was opened, consistently.)"""
    _core.configure_remote_cache(0, "", 0)
    try:
        read_overwritten_shards(tmp_path, s3_environment)
    finally:
        _core.configure_remote_cache(256 << 20, "", 0)  # the default


def read_overwritten_shards(tmp_path, s3):
    keys = [f"s{i:03d}" for i in range(24)]
    paths = [
        write_tar(tmp_path / f"shard-{s:06d}.tar", keys[s * 8 : (s + 1) * 8]) for s in range(3)
    ]
    other = write_tar(tmp_path / "other.tar", keys[16:], reverse=True)
    s3.create_bucket("overwritten")
    for on_error in ("skip", "raise"):
        for path in paths:
            s3.s3.upload_file(path, "overwritten", f"{on_error}/{os.path.basename(path)}")
        ds = stoker.ShardDataset(f"s3://overwritten/{on_error}/shard-{{000000..000002}}.tar", SPEC)
        loader = stoker.Loader(
            ds, batch_size=4, shuffle=False, prefetch=1, threads=1, on_error=on_error
        )

        def overwrite(on_error=on_error):
            s3.s3.upload_file(other, "overwritten", f"{on_error}/shard-000002.tar")

        if on_error == "raise":
            with pytest.raises(stoker.Error, match="shard-000002.tar"):
                delivered_around(loader, overwrite)
            continue
        pairs = delivered_around(loader, overwrite)
        assert_right(pairs)
        assert_replaced(pairs, keys[:16], 8)
        stats = loader.stats()
        assert stats["skipped"] == 8
        assert (
            "changed since" in stats["skips"][0]["reason"] or "412" in stats["skips"][0]["reason"]
        )
