"""`stoker shard` owns its output folder (issue 21, items 7, 12 and 13): a rerun leaves only the
shards of its index, readers of a folder with an index.json read that index, a second run into a
folder being written refuses, a full disk is reported without a traceback or a temporary left
behind, and two source files that would be one member are refused when writing (and a shard
holding such a sample is read under the loader's on_error)."""

import glob
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from child import describe, run_python
from images import encode, photo

import stoker
import stoker.cli

N = 40


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))


def make_source(root, n=N):
    """n samples: a JPEG, a caption and a label each."""
    os.makedirs(root, exist_ok=True)
    for i in range(n):
        (root / f"x{i:03d}.jpg").write_bytes(encode(photo(80, 60, seed=i), "JPEG"))
        (root / f"x{i:03d}.txt").write_text(f"caption {i}")
        (root / f"x{i:03d}.cls").write_text(str(i % 4))
    return root


def shard_command(*args):
    """`python -m stoker shard ARGS`, run in a child process (as a user runs it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(stoker.__file__)), env.get("PYTHONPATH", "")]
    )
    return subprocess.run(
        [sys.executable, "-m", "stoker", "shard", *map(str, args), "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def index_shards(dst):
    return json.loads((dst / "index.json").read_text())["shards"]


def write_tar(path, members):
    """members: list of (name, bytes), in this order."""
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


# ---------------------------------------------------------------------------------------------
# Item 7: the writer owns its folder; readers of a folder with an index.json read that index


def test_a_rerun_with_other_shard_bytes_after_removing_its_state_leaves_only_its_shards(
    tmp_path, cache
):
    src, dst = make_source(tmp_path / "src"), tmp_path / "dst"
    first = stoker.write_shards(src, dst, shard_bytes="20KB", progress=False)
    (dst / "notes.txt").write_text("mine")
    other = write_tar(dst / "other-000001.tar", [("y.txt", b"not stoker's")])
    # What the error message of a rerun with other options says to do.
    shutil.rmtree(dst / ".stoker_shard")
    done = shard_command(src, dst, "--shard-bytes", "60KB")
    assert done.returncode == 0, done.stderr
    names = index_shards(dst)
    assert len(names) < len(first.shards)
    assert sorted(os.path.basename(p) for p in glob.glob(str(dst / "shard-*"))) == sorted(
        names + [f"{n}.index" for n in names]
    )
    assert (dst / "notes.txt").read_text() == "mine" and os.path.exists(other)
    ds = stoker.ShardDataset(str(dst / "shard-*.tar"), {"caption": stoker.Text()})
    assert len(ds) == N and sorted(ds.keys) == [f"x{i:03d}" for i in range(N)]


def test_stoker_shard_refuses_a_folder_holding_shards_of_its_names_that_it_did_not_write(
    tmp_path, cache
):
    src, dst = make_source(tmp_path / "src"), tmp_path / "dst"
    os.makedirs(dst)
    theirs = write_tar(dst / "shard-000000.tar", [("y.txt", b"someone else's")])
    done = shard_command(src, dst, "--shard-bytes", "60KB")
    assert done.returncode == 1, done.stderr
    assert "shard-000000.tar" in done.stderr and "Traceback" not in done.stderr
    with tarfile.open(theirs) as tar:
        assert tar.getnames() == ["y.txt"]


def test_a_folder_or_a_glob_in_a_folder_with_an_index_json_reads_the_index_shards(tmp_path, cache):
    src, dst = make_source(tmp_path / "src"), tmp_path / "dst"
    report = stoker.write_shards(src, dst, shard_bytes="30KB", progress=False)
    # A shard the index does not list (an older run's, a copy): a glob finds it, the index not.
    shutil.copy(dst / report.shards[0], dst / "shard-000099.tar")
    spec = {"caption": stoker.Text()}
    listed = [str(dst / n) for n in report.shards]
    for given in (dst, str(dst), str(dst / "shard-*.tar")):
        ds = stoker.ShardDataset(given, spec)
        assert ds.urls == listed and len(ds) == N, given
    # A glob choosing some of them reads those it chooses.
    ds = stoker.ShardDataset(str(dst / "shard-00000[01].tar"), spec)
    assert ds.urls == listed[:2]
    # A folder without an index.json is named, with what to give instead.
    os.makedirs(tmp_path / "plain")
    shutil.copy(dst / report.shards[0], tmp_path / "plain" / "a.tar")
    with pytest.raises(stoker.DatasetError, match=r"plain.*index\.json"):
        stoker.ShardDataset(tmp_path / "plain", spec)
    assert len(stoker.ShardDataset(str(tmp_path / "plain" / "*.tar"), spec)) > 0


# ---------------------------------------------------------------------------------------------
# Item 12: one run at a time; a full disk is an error message, with nothing partial left


def test_a_second_stoker_shard_run_into_a_folder_being_written_refuses(tmp_path, cache):
    src, dst = make_source(tmp_path / "src"), tmp_path / "dst"
    second = []

    def progress(done, total):
        if done == 1:  # the first run is writing: another starts on the same folder
            second.append(shard_command(src, dst, "--shard-bytes", "20KB"))

    report = stoker.write_shards(src, dst, shard_bytes="20KB", progress=progress)
    (other,) = second
    assert other.returncode == 1, describe(other)
    assert f"another stoker shard run is writing {dst}" in other.stderr, other.stderr
    assert "Traceback" not in other.stderr
    assert len(report.shards) > 2
    assert len(stoker.ShardDataset(dst, {"caption": stoker.Text()})) == N


FULL_DISK = """
    import resource, signal, sys
    import stoker.cli

    # Writes past this size fail with EFBIG (File too large), as writes on a full disk fail
    # with ENOSPC: through the same write calls, with the same error path.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limit = int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    sys.exit(stoker.cli.main(["shard", sys.argv[1], sys.argv[2], "--shard-bytes", "60KB",
                              "--no-progress"]))
"""


def test_a_full_disk_in_stoker_shard_is_named_and_leaves_no_temporary(tmp_path, cache):
    src, dst = make_source(tmp_path / "src"), tmp_path / "dst"
    child = run_python(FULL_DISK, str(src), str(dst), str(30_000))
    assert child.returncode == 1, describe(child)
    assert "Traceback" not in child.stderr, describe(child)
    assert child.stderr.startswith("stoker shard: error: "), describe(child)
    assert "shard-000000.tar" in child.stderr and "File too large" in child.stderr
    assert [p for p in os.listdir(dst) if p.endswith((".tmp", ".partial"))] == []
    assert not glob.glob(str(dst / "shard-*"))
    # Room again: the same command writes the shards.
    assert (
        stoker.cli.main(["shard", str(src), str(dst), "--shard-bytes", "60KB", "--no-progress"])
        == 0
    )
    assert len(stoker.ShardDataset(dst, {"caption": stoker.Text()})) == N


def test_a_journal_line_cut_short_is_written_again_not_a_crash(tmp_path, cache):
    src, dst = make_source(tmp_path / "src"), tmp_path / "dst"
    report = stoker.write_shards(src, dst, shard_bytes="30KB", progress=False)
    journal = dst / ".stoker_shard" / "done.jsonl"
    lines = journal.read_text().splitlines()
    # The run stopped (a full disk) while appending the last shard's line.
    journal.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:12])
    again = stoker.write_shards(src, dst, shard_bytes="30KB", progress=False)
    assert again.resumed == len(report.shards) - 1
    assert again.shard_bytes == report.shard_bytes


# ---------------------------------------------------------------------------------------------
# Item 13: two files that would be one member


def test_stoker_shard_refuses_two_source_files_that_are_one_member(tmp_path, cache):
    src = make_source(tmp_path / "src", 6)
    (src / "x003.JPG").write_bytes(encode(photo(80, 60, seed=99), "JPEG"))
    done = shard_command(src, tmp_path / "dst", "--shard-bytes", "60KB")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert str(src / "x003.jpg") in done.stderr and str(src / "x003.JPG") in done.stderr
    assert not glob.glob(str(tmp_path / "dst" / "shard-*"))
    # In an ImageFolder tree, cat/a.jpg and cat/a.JPG would be one member of sample cat/a.
    tree = tmp_path / "tree"
    for name in ("cat", "dog"):
        os.makedirs(tree / name)
        (tree / name / "a.jpg").write_bytes(encode(photo(80, 60, seed=1), "JPEG"))
    (tree / "cat" / "a.JPG").write_bytes(encode(photo(80, 60, seed=2), "JPEG"))
    done = shard_command(tree, tmp_path / "tree-dst", "--shard-bytes", "60KB")
    assert done.returncode == 1, done.stderr
    assert str(tree / "cat" / "a.jpg") in done.stderr and str(tree / "cat" / "a.JPG") in done.stderr


# Issue 33 item 4: cat/a.jpg + cat/a.png were written as one sample holding both images (exit
# 0), while shards.md said they were refused. Each image of a tree is a sample, and both would
# be sample cat/a: refused, naming both files; a caption beside them stays a field.
def test_an_image_folder_stem_with_two_images_is_refused_naming_both(tmp_path, cache):
    tree = tmp_path / "tree"
    for name in ("cat", "dog"):
        os.makedirs(tree / name)
        (tree / name / "a.jpg").write_bytes(encode(photo(80, 60, seed=1), "JPEG"))
        (tree / name / "a.txt").write_text(f"a {name}")
    (tree / "cat" / "a.png").write_bytes(encode(photo(80, 60, seed=2), "PNG"))
    done = shard_command(tree, tmp_path / "dst", "--shard-bytes", "60KB")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert str(tree / "cat" / "a.jpg") in done.stderr and str(tree / "cat" / "a.png") in done.stderr
    assert "sample 'cat/a'" in done.stderr
    assert not glob.glob(str(tmp_path / "dst" / "shard-*"))
    # Without the second image the tree is written: one image and its caption per sample.
    (tree / "cat" / "a.png").unlink()
    done = shard_command(tree, tmp_path / "dst", "--shard-bytes", "60KB")
    assert done.returncode == 0, done.stderr
    assert "fields: jpg (2), txt (2), cls (2)" in done.stdout


def test_a_sample_with_two_members_of_a_field_is_named_or_skipped_when_read(tmp_path, cache):
    shard = write_tar(
        tmp_path / "dup.tar",
        [
            ("s1.txt", b"one"),
            ("s1.cls", b"1"),
            ("s3.txt", b"three"),
            ("s3.TXT", b"THREE"),
            ("s3.cls", b"3"),
            ("s4.txt", b"four"),
            ("s4.cls", b"4"),
        ],
    )
    spec = {"caption": stoker.Text(), "label": stoker.Label()}
    ds = stoker.ShardDataset(shard, spec)  # the dataset is made; the sample is bad
    assert ds.keys == ["s1", "s3", "s4"]
    raising = stoker.Loader(ds, batch_size=8, shuffle=False, output="numpy")
    with pytest.raises(stoker.DatasetError, match=r"dup\.tar: sample 's3', field 'txt': .*two"):
        next(iter(raising))
    skipping = stoker.Loader(ds, batch_size=8, shuffle=False, output="numpy", on_error="skip")
    (batch,) = list(skipping)
    # The bad sample's slot holds a replacement drawn from the seed, as for every dataset kind.
    assert batch["__key__"][0] == "s1" and batch["__key__"][2] == "s4"
    assert batch["__key__"][1] in ("s1", "s4")
    assert batch["caption"] == [{"s1": "one", "s4": "four"}[k] for k in batch["__key__"]]
    (skip,) = skipping.stats()["skips"]
    assert "sample 's3', field 'txt'" in skip["reason"] and "dup.tar" in skip["reason"]
    # A spec that does not read the doubled field reads the sample.
    (batch,) = list(
        stoker.Loader(
            stoker.ShardDataset(shard, {"label": stoker.Label()}),
            batch_size=8,
            shuffle=False,
            output="numpy",
        )
    )
    assert np.asarray(batch["label"]).tolist() == [1, 3, 4]


def test_an_s3_folder_or_glob_with_an_index_json_reads_the_index_shards(s3_environment, tmp_path):
    src, dst = make_source(tmp_path / "src"), tmp_path / "dst"
    report = stoker.write_shards(src, dst, shard_bytes="30KB", progress=False)
    s3_environment.create_bucket("stoker-folders")
    uploads = [*report.shards, *(f"{n}.index" for n in report.shards), "index.json"]
    for name in uploads:
        s3_environment.s3.upload_file(str(dst / name), "stoker-folders", f"out/{name}")
    s3_environment.s3.upload_file(
        str(dst / report.shards[0]), "stoker-folders", "out/shard-000099.tar"
    )
    listed = [f"s3://stoker-folders/out/{n}" for n in report.shards]
    spec = {"caption": stoker.Text()}
    for given in ("s3://stoker-folders/out/", "s3://stoker-folders/out/shard-*.tar"):
        ds = stoker.ShardDataset(given, spec)
        assert ds.urls == listed and len(ds) == N, given


# ---------------------------------------------------------------------------------------------
# Issue 33 item 3: stoker shard wrote a text file named x.jpg, a truncated JPEG and a 0-byte .jpg
# into the shards with exit 0; only a later stoker check found them, and training under raise
# stopped mid-epoch. Every checked file is read by the engine before the plan.


def test_stoker_shard_names_every_bad_file_and_exits_non_zero_or_skips_them(tmp_path, cache):
    src = make_source(tmp_path / "src", 8)
    jpeg = (src / "x001.jpg").read_bytes()
    bad = {
        "x001.jpg": b"<html>not an image</html>\n",  # a text file named .jpg
        "x002.jpg": jpeg[: len(jpeg) // 2],  # truncated
        "x003.jpg": b"",  # 0 bytes
        "x004.txt": b"caption \xff\xfe",  # not UTF-8
        "x005.cls": b"cat",  # not an integer
    }
    for name, data in bad.items():
        (src / name).write_bytes(data)
    (src / "x006.json").write_text("{not json")
    (src / "x007.npy").write_bytes(b"\x93NUMPY\x01\x00")  # a header cut short
    bad_files = [*bad, "x006.json", "x007.npy"]
    done = shard_command(src, tmp_path / "dst", "--shard-bytes", "60KB")
    assert done.returncode == 1, done.stdout
    assert "Traceback" not in done.stderr
    for name in bad_files:
        assert str(src / name) in done.stderr, (name, done.stderr)
    assert "not a JPEG, PNG or WebP" in done.stderr and "truncated JPEG" in done.stderr
    assert "no bytes" in done.stderr and "--skip-bad" in done.stderr
    assert not glob.glob(str(tmp_path / "dst" / "shard-*"))
    # With --skip-bad their samples are left out and listed; the rest is written and reads.
    done = shard_command(src, tmp_path / "dst", "--shard-bytes", "60KB", "--skip-bad")
    assert done.returncode == 0, done.stderr
    assert "left out 7 samples with bad files" in done.stdout
    for name in bad_files:
        assert str(src / name) in done.stdout
    ds = stoker.ShardDataset(str(tmp_path / "dst"), {"image": stoker.Image(size=(16, 16))})
    assert len(ds) == 1
    (batch,) = list(stoker.Loader(ds, batch_size=1, shuffle=False, output="numpy"))
    assert batch["__key__"] == ["x000"]
