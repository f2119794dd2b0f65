"""`stoker check` of shard datasets and mixes (issue 23): a shard set with each defect made on
purpose (a missing member, a duplicate key, a corrupt JPEG, unequal shards, class-ordered shards,
a damaged or stale sidecar index), each found and named exactly; a mix with a key one dataset
lacks, and one whose datasets disagree on a key's dtype and shape; and clean shards written by
`stoker shard` with its shuffle, which get no error."""

import io
import json
import os
import tarfile
import warnings

import numpy as np
import pytest
from images import encode, photo

import stoker
from stoker import _core
from stoker.checks.findings import CheckReport
from stoker.checks.mix import check_mix
from stoker.checks.shards import BATCH_SIZE, FIRST_BATCHES, check_shards
from stoker.datasets.shards import DEFAULT_SHUFFLE_BUFFER

SPEC = {"image": stoker.Image(size=(32, 32)), "label": stoker.Label()}
LABELS = {"label": stoker.Label()}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def jpeg():
    return encode(photo(64, 48, seed=1), "JPEG", quality=90)


def write_tar(path, samples):
    """samples: (key, {field: bytes}) in tar order."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, fields in samples:
            for field, data in fields.items():
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


def image_samples(jpeg, keys, label=lambda i: i % 3):
    return [(key, {"jpg": jpeg, "cls": str(label(i)).encode()}) for i, key in enumerate(keys)]


def label_shards(folder, labels, per_shard):
    """Shards of cls members only, in the order of `labels`, `per_shard` samples each."""
    urls = []
    for s in range(0, len(labels), per_shard):
        samples = [
            (f"s{s + i:06d}", {"cls": str(int(v)).encode()})
            for i, v in enumerate(labels[s : s + per_shard])
        ]
        urls.append(write_tar(folder / f"labels-{s // per_shard:04d}.tar", samples))
    return urls


def only(report, check, severity=None):
    found = [f for f in report.by_check(check) if severity is None or f.severity == severity]
    assert len(found) == 1, f"expected one {check} finding, got:\n{report}"
    return found[0]


def errors_but(report, *checks):
    return [f for f in report.errors() if f.check not in checks]


# --- members -------------------------------------------------------------------------------


def test_a_missing_member_is_an_error_naming_shard_key_and_field(tmp_path, jpeg):
    samples = image_samples(jpeg, [f"k{i:02d}" for i in range(12)])
    del samples[7][1]["cls"]
    first = write_tar(tmp_path / "a.tar", samples)
    second = write_tar(tmp_path / "b.tar", image_samples(jpeg, [f"m{i:02d}" for i in range(12)]))
    report = check_shards(stoker.ShardDataset([first, second], SPEC), progress=False)
    finding = only(report, "missing_field")
    assert finding.severity == "error" and not report.ok
    assert (finding.shard, finding.key, finding.field) == (first, "k07", "label")
    assert "1 of the shard's 12 samples lack field 'label' (cls)" in finding.message
    assert errors_but(report, "missing_field") == []
    # A field no sample has is one finding for the dataset, naming the fields there are.
    wrong = {"image": stoker.Image("png", size=(32, 32))}
    report = check_shards(stoker.ShardDataset([second], wrong), progress=False)
    finding = only(report, "missing_field")
    assert finding.field == "image" and "no sample has field 'image' (png)" in finding.message
    assert "cls, jpg" in finding.message


def test_duplicate_keys_within_a_shard_are_errors_and_across_shards_warnings(tmp_path, jpeg):
    keys = [f"k{i:02d}" for i in range(10)]
    split = image_samples(jpeg, keys)
    split.append(("k03", {"jpg": jpeg}))  # k03 again, after other samples: two samples
    twice = split[:2] + [("k05x", {"jpg": jpeg, "JPG": jpeg, "cls": b"1"})]
    a = write_tar(tmp_path / "a.tar", split)
    b = write_tar(tmp_path / "b.tar", image_samples(jpeg, ["k01", "z1", "z2"]) + twice[2:])
    report = check_shards(stoker.ShardDataset([a, b], SPEC), progress=False)
    within = [f for f in report.by_check("duplicate_key") if f.severity == "error"]
    assert {(f.shard, f.key) for f in within} == {(a, "k03"), (b, "k05x")}
    assert "samples 3 and 10 of the shard" in next(f for f in within if f.key == "k03").message
    assert "two members of this field" in next(f for f in within if f.key == "k05x").message
    across = only(report, "duplicate_key", "warning")
    assert (across.shard, across.key) == (a, "k01") and b in across.message
    # The split sample's second part lacks its label: that is found too.
    assert only(report, "missing_field").key == "k03"
    # A shard listed twice is a warning of its own: every sample read twice.
    report = check_shards(stoker.ShardDataset([b, b], SPEC), progress=False)
    listed = [f for f in report.by_check("duplicate_key") if "listed 2 times" in f.message]
    assert [f.shard for f in listed] == [b]


def test_a_corrupt_jpeg_is_found_by_the_probe_or_by_the_deep_decode(tmp_path, jpeg):
    samples = image_samples(jpeg, [f"k{i:02d}" for i in range(16)])
    samples[4][1]["jpg"] = b"<html>404 Not Found</html>"  # not an image at all
    samples[9][1]["jpg"] = jpeg[: len(jpeg) // 2]  # its header intact, its scan cut
    samples[11][1]["cls"] = b"cat"  # a label that is no integer
    url = write_tar(tmp_path / "a.tar", samples)
    ds = stoker.ShardDataset(url, SPEC)
    shallow = check_shards(ds, progress=False)
    bad = {(f.key, f.field) for f in shallow.by_check("undecodable_member")}
    assert bad == {("k04", "image"), ("k11", "label")}
    assert shallow.scanned["images_probed"] == 16
    deep = check_shards(ds, deep=True, progress=False)
    found = {f.key: f for f in deep.by_check("undecodable_member")}
    assert set(found) == {"k04", "k09", "k11"}
    assert all(f.severity == "error" and f.shard == url for f in found.values())
    assert "truncated" in found["k09"].message.lower() and found["k09"].field == "image"
    assert "'k11.cls' is not an integer" in found["k11"].message and "b'cat'" in found["k11"].found
    assert deep.scanned["images_decoded"] == 16 and deep.scanned["members_read"] == 32
    assert errors_but(deep, "undecodable_member") == []
    # The same images, decoded by a Loader, fail where the check said.
    with pytest.raises(stoker.Error, match="k04|k09|k11"):
        list(stoker.Loader(ds, batch_size=16, shuffle=False))


# Found by `stoker check --deep`: an intact "with space.jpg" after a member with its last 40
# bytes zeroed was flagged undecodable too (TurboJPEG kept the failed header parse; see
# test_a_damaged_image_never_takes_the_next_intact_image_with_it in test_shards.py).
def test_deep_flags_the_damaged_image_and_not_the_intact_one_after_it(tmp_path):
    small = encode(photo(16, 12, seed=2), "JPEG")
    intact = encode(photo(40, 30, seed=3), "JPEG")
    samples = [
        ("before", {"jpg": intact, "cls": b"0"}),
        ("damaged", {"jpg": small[:-40] + bytes(40), "cls": b"0"}),
        ("with space", {"jpg": intact, "cls": b"1"}),
        ("cut", {"jpg": small[:20], "cls": b"0"}),
        ("after cut", {"jpg": intact, "cls": b"1"}),
    ]
    ds = stoker.ShardDataset(write_tar(tmp_path / "a.tar", samples), SPEC)
    deep = check_shards(ds, deep=True, progress=False)
    assert {f.key for f in deep.by_check("undecodable_member")} == {"damaged", "cut"}
    assert deep.scanned["images_decoded"] == 5


def test_many_bad_members_are_listed_fifty_then_counted(tmp_path):
    url = write_tar(
        tmp_path / "a.tar", [(f"k{i:02d}", {"jpg": b"", "cls": b"1"}) for i in range(60)]
    )
    report = check_shards(stoker.ShardDataset(url, SPEC), progress=False)
    bad = report.by_check("undecodable_member")
    assert len(bad) == 51 and [f.key for f in bad[:2]] == ["k00", "k01"]
    assert bad[-1].found == 60 and "10 more like the 50 above (60 in all)" in bad[-1].message


def test_deep_reads_json_arrays_and_texts_as_the_loader_does(tmp_path):
    def npy(array):
        out = io.BytesIO()
        np.save(out, array)
        return out.getvalue()

    samples = [
        (
            f"k{i}",
            {
                "txt": b"a caption",
                "json": json.dumps({"width": 64}).encode(),
                "npy": npy(np.zeros((2, 3), np.float32)),
            },
        )
        for i in range(6)
    ]
    samples[1][1]["txt"] = b"\xff\xfe not utf-8"
    samples[2][1]["json"] = b'{"width": "wide"}'
    samples[3][1]["npy"] = npy(np.zeros((4,), np.float32))
    url = write_tar(tmp_path / "a.tar", samples)
    spec = {
        "caption": stoker.Text(),
        "meta": stoker.Json(keys={"width": "int64"}),
        "action": stoker.Array("npy"),
    }
    report = check_shards(stoker.ShardDataset(url, spec), deep=True, progress=False)
    found = {(f.key, f.field) for f in report.by_check("undecodable_member")}
    assert found == {("k1", "caption"), ("k2", "meta"), ("k3", "action")}
    assert "float32 (2, 3)" in next(f for f in report.findings if f.key == "k3").message


def test_deep_refuses_the_members_the_loader_refuses_that_pythons_parsers_passed(tmp_path):
    """Issue 34: the check parsed members in Python (numpy's .npy header, json.loads) beside the
    loader's C++ decoders, and passed members the loader refuses: a .npy whose header numpy
    reads but whose values are cut short, an array of strings, a token id beyond int64, a json
    integer beyond int64. It now calls the loader's decoders, and says what the loader says."""

    def npy(array):
        out = io.BytesIO()
        np.save(out, array)
        return out.getvalue()

    good = {
        "npy": npy(np.zeros((2, 3), np.float32)),
        "ids.npy": npy(np.arange(4, dtype=np.int32)),
        "json": json.dumps({"n": 3}).encode(),
    }
    samples = [(f"k{i}", dict(good)) for i in range(5)]
    samples[1][1]["npy"] = npy(np.zeros((2, 3), np.float32))[:-8]  # the header intact
    samples[2][1]["npy"] = npy(np.array([["ab", "cd", "ef"]] * 2))  # <U2 (2, 3)
    samples[3][1]["ids.npy"] = npy(np.array([1, 2**63], np.uint64))
    samples[4][1]["json"] = b'{"n": 100000000000000000000000}'
    url = write_tar(tmp_path / "a.tar", samples)
    spec = {
        "action": stoker.Array("npy"),
        "ids": stoker.Tokens("ids.npy"),
        "meta": stoker.Json(keys={"n": "int64"}),
    }
    ds = stoker.ShardDataset(url, spec)
    report = check_shards(ds, deep=True, progress=False)
    found = {(f.key, f.field): f for f in report.by_check("undecodable_member")}
    assert set(found) == {("k1", "action"), ("k2", "action"), ("k3", "ids"), ("k4", "meta")}
    assert "its shape needs 24 bytes of values, the member holds 16" in found["k1", "action"].found
    assert found["k2", "action"].found == "an array of dtype U2, which batches cannot hold"
    assert "the token id 9223372036854775808 lies outside int64" in found["k3", "ids"].found
    assert "lies outside int64" in found["k4", "meta"].found
    # The loader refuses each of them, in the same words, and reads the others.
    for key, field in found:
        one = stoker.ShardDataset(
            write_tar(tmp_path / f"{key}.tar", [samples[int(key[1:])]]), {field: spec[field]}
        )
        with pytest.raises(stoker.Error) as refused:
            list(stoker.Loader(one, batch_size=1, shuffle=False))
        assert found[key, field].found in str(refused.value)
    clean = stoker.ShardDataset(write_tar(tmp_path / "clean.tar", samples[:1]), spec)
    assert check_shards(clean, deep=True, progress=False).ok


def test_a_label_the_loader_reads_is_no_finding_though_the_index_holds_none(tmp_path, jpeg):
    """The shard index holds a label for plain decimal cls members only; the check took every
    other one for a bad label, where the loader reads "1_000" (as Python's int() does). The
    loader's own decoder now judges them: only what it refuses is a finding."""
    samples = image_samples(jpeg, ["k0", "k1", "k2"])
    samples[1][1]["cls"] = b"1_000"
    samples[2][1]["cls"] = b"1e3"
    ds = stoker.ShardDataset(write_tar(tmp_path / "a.tar", samples), SPEC)
    found = only(check_shards(ds, progress=False), "undecodable_member")
    assert found.key == "k2" and found.found == "b'1e3'"
    assert "a cls member holds an integer, not '1e3'" in found.message
    batch = next(iter(stoker.Loader(ds, batch_size=2, shuffle=False)))
    assert np.asarray(batch["label"]).tolist() == [0, 1000]


def test_deep_decodes_every_clip_and_names_one_shorter_than_the_window(tmp_path, video):
    clip = open(video("h264"), "rb").read()  # 120 frames
    samples = [(f"c{i}", {"mp4": clip, "cls": b"0"}) for i in range(3)]
    samples[1][1]["mp4"] = clip[: len(clip) // 3]
    url = write_tar(tmp_path / "clips.tar", samples)
    ds = stoker.ShardDataset(url, {"clip": stoker.Clip(frames=(0, 60), size=(32, 32))})
    report = check_shards(ds, deep=True, progress=False)
    assert {f.key for f in report.by_check("undecodable_member")} == {"c1"}
    assert report.scanned["clips_decoded"] == 3
    late = stoker.ShardDataset(url, {"clip": stoker.Clip(frames=(0, 150), size=(32, 32))})
    found = {f.key: f for f in check_shards(late, deep=True, progress=False).findings}
    assert "the clip has 120 frames; the spec's window reads frame 150" in found["c0"].message


# --- shards and their indexes --------------------------------------------------------------


def test_unequal_shards_are_a_warning_saying_the_spread(tmp_path, jpeg):
    sizes = [40, 40, 10, 40]
    urls = [
        write_tar(tmp_path / f"s{s}.tar", image_samples(jpeg, [f"s{s}k{i}" for i in range(n)]))
        for s, n in enumerate(sizes)
    ]
    report = check_shards(stoker.ShardDataset(urls, SPEC), progress=False)
    finding = only(report, "shard_sizes")
    assert finding.severity == "warning" and report.ok
    assert finding.shard == urls[0] and "s2.tar" in finding.message
    bytes_ = np.array([os.path.getsize(u) for u in urls], float)
    spread = (bytes_.max() - bytes_.min()) / bytes_.mean()
    assert finding.found == f"spread {spread:.0%}"
    # A writer's last, smaller shard alone is no finding.
    report = check_shards(stoker.ShardDataset([urls[0], urls[1], urls[2]], SPEC), progress=False)
    assert report.by_check("shard_sizes") == []


def written_shards(tmp_path, jpeg, name="shards", classes=3, per_class=8, shard_bytes=20_000):
    """An ImageFolder tree of real JPEGs written by `stoker shard` (shuffled, with sidecars)."""
    src = tmp_path / f"{name}-src"
    for c in range(classes):
        folder = src / f"class{c}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            (folder / f"img{i:03d}.jpg").write_bytes(
                encode(photo(64, 48, seed=100 * c + i), "JPEG", quality=85)
            )
    dst = tmp_path / name
    stoker.write_shards(src, dst, shard_bytes=shard_bytes, shuffle_seed=0, progress=False)
    return dst, sorted(str(p) for p in dst.glob("shard-*.tar"))


def test_a_damaged_or_stale_sidecar_is_named(tmp_path, jpeg):
    dst, shards = written_shards(tmp_path, jpeg)
    assert len(shards) >= 3
    damaged = bytearray(open(shards[0] + ".index", "rb").read())
    damaged[len(damaged) // 2] ^= 0xFF
    open(shards[0] + ".index", "wb").write(bytes(damaged))
    # Stale: the shard rewritten (one sample fewer) after its sidecar was written.
    with tarfile.open(shards[1]) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(shards[1], "w", format=tarfile.USTAR_FORMAT) as tar:
        for member, data in members[2:]:
            tar.addfile(member, io.BytesIO(data))
    with pytest.warns(UserWarning, match="did not match their shard"):
        ds = stoker.ShardDataset(dst, SPEC)
    report = check_shards(ds, progress=False)
    refused = {f.shard: f for f in report.by_check("shard_index")}
    assert set(refused) == {shards[0], shards[1]}
    assert all(f.severity == "warning" for f in refused.values())
    assert "checksum" in refused[shards[0]].message.lower()
    assert f"it lists {len(members)} members" in refused[shards[1]].message
    assert refused[shards[1]].file == shards[1] + ".index"
    # Found also once the scans are cached, when opening the dataset says nothing more: the
    # check opens the sidecars anew.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cached = stoker.ShardDataset(dst, SPEC)
    again = check_shards(cached, progress=False)
    assert {f.shard for f in again.by_check("shard_index")} == {shards[0], shards[1]}


def test_a_sidecar_that_passes_the_quick_check_but_lies_is_an_error(tmp_path, jpeg):
    keys = [f"k{i:02d}" for i in range(8)]
    url = write_tar(tmp_path / "a.tar", image_samples(jpeg, keys))
    _core.write_shard_sidecar(url)
    sidecar = open(url + ".index", "rb").read()
    # The shard rewritten: a middle sample renamed, the size and first and last headers kept.
    write_tar(url, image_samples(jpeg, [k if k != "k04" else "x04" for k in keys]))
    os.remove(url + ".index")
    scanned = stoker.ShardDataset(url, SPEC, cache_dir=tmp_path / "scan")
    open(url + ".index", "wb").write(sidecar)
    report = check_shards(scanned, progress=False)
    finding = only(report, "shard_index")
    assert finding.severity == "error" and finding.shard == url
    assert "'k04.jpg'" in finding.message and "'x04.jpg'" in finding.message
    # A dataset opened through the lying sidecar: the deep read finds it.
    trusting = stoker.ShardDataset(url, SPEC, cache_dir=tmp_path / "trust")
    assert "k04" in trusting.keys
    assert check_shards(trusting, progress=False).by_check("shard_index") == []
    deep = check_shards(trusting, deep=True, progress=False)
    finding = only(deep, "shard_index")
    assert finding.severity == "error" and "changed since its index was made" in finding.message


def test_a_truncated_shard_is_an_error(tmp_path, jpeg):
    url = write_tar(tmp_path / "a.tar", image_samples(jpeg, [f"k{i}" for i in range(6)]))
    with open(url, "r+b") as f:
        f.truncate(os.path.getsize(url) // 2)
    report = check_shards(stoker.ShardDataset(url, SPEC), progress=False)
    finding = only(report, "shard_damage")
    assert finding.severity == "error" and finding.shard == url


# --- labels: the narrow-batch trap ---------------------------------------------------------


def test_class_ordered_shards_give_single_class_first_batches_an_error(tmp_path):
    # Two classes, each one shard longer than the default shuffle buffer: the buffer fills from
    # one shard, so every first batch is one class.
    per = DEFAULT_SHUFFLE_BUFFER + FIRST_BATCHES * BATCH_SIZE + 256
    urls = label_shards(tmp_path, np.repeat([0, 1], per), per)
    report = check_shards(stoker.ShardDataset(urls, LABELS), progress=False)
    finding = only(report, "label_spread_batches")
    assert finding.severity == "error" and not report.ok
    assert "each hold a single label" in finding.message and "of the dataset's 2" in finding.message
    assert "shuffle_buffer=" in finding.fix
    assert only(report, "label_spread_shards").severity == "info"
    # What the check said is what a Loader delivers.
    with stoker.Loader(stoker.ShardDataset(urls, LABELS), batch_size=BATCH_SIZE) as loader:
        for _, batch in zip(range(FIRST_BATCHES), loader):
            assert len(np.unique(np.asarray(batch["label"]))) == 1
    # The same labels written shuffled: no finding.
    mixed = np.random.default_rng(0).permutation(np.repeat([0, 1], per))
    (tmp_path / "mixed").mkdir()
    report = check_shards(
        stoker.ShardDataset(label_shards(tmp_path / "mixed", mixed, per), LABELS), progress=False
    )
    assert report.findings == []


def test_one_label_dominating_the_first_batches_is_an_error(tmp_path):
    # 3 classes, one shard of 9,000 each (longer than the default buffer of 8,192): the first
    # batches mix in a little of the next shard, so they hold 1 or 2 labels (not always 1),
    # but nearly all of their samples are one label, a third of the data.
    labels = np.repeat([0, 1, 2], 9000)
    report = check_shards(
        stoker.ShardDataset(label_shards(tmp_path, labels, 9000), LABELS), progress=False
    )
    finding = only(report, "label_spread_batches")
    assert finding.severity == "error" and not report.ok, str(report)
    assert "training starts on one class at a time" in finding.message
    assert "of the dataset's samples" in finding.message, finding.message
    # What the check said is what a Loader delivers: one label makes >= 90% of the samples.
    with stoker.Loader(stoker.ShardDataset(label_shards(tmp_path, labels, 9000), LABELS),
                       batch_size=BATCH_SIZE, output="numpy") as loader:
        first = np.concatenate(
            [np.asarray(b["label"]) for _, b in zip(range(FIRST_BATCHES), loader)]
        )
    assert np.bincount(first).max() / len(first) >= 0.9
    # The same labels written shuffled: no finding (test_milder_class_order... is the other
    # side of the threshold: 16 classes, no label dominating, narrow batches a warning only).
    (tmp_path / "mixed").mkdir()
    mixed = np.random.default_rng(2).permutation(labels)
    report = check_shards(
        stoker.ShardDataset(label_shards(tmp_path / "mixed", mixed, 9000), LABELS), progress=False
    )
    assert report.findings == []


def test_milder_class_order_gives_narrow_batches_a_warning(tmp_path):
    # 16 classes of 1,500 samples, one shard each: the buffer holds about 6 of them at once.
    labels = np.repeat(np.arange(16), 1500)
    report = check_shards(
        stoker.ShardDataset(label_shards(tmp_path, labels, 1500), LABELS), progress=False
    )
    finding = only(report, "label_spread_batches")
    assert finding.severity == "warning" and report.ok
    assert "where random batches of 256 would hold 16.0" in finding.message
    assert float(finding.found.split()[0]) < 8
    (tmp_path / "mixed").mkdir()
    mixed = np.random.default_rng(1).permutation(labels)
    report = check_shards(
        stoker.ShardDataset(label_shards(tmp_path / "mixed", mixed, 1500), LABELS), progress=False
    )
    assert report.findings == []


# --- clean shards --------------------------------------------------------------------------


def test_shards_written_by_stoker_shard_have_no_error_shallow_or_deep(tmp_path, jpeg):
    dst, shards = written_shards(tmp_path, jpeg, classes=4, per_class=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every sidecar used
        ds = stoker.ShardDataset(dst, SPEC)
    for deep in (False, True):
        report = check_shards(ds, deep=deep, progress=False)
        assert report.ok and report.warnings() == [], str(report)
        assert report.kind == "shards" and report.deep == deep
        assert set(report.checks) >= {
            "missing_field",
            "duplicate_key",
            "shard_index",
            "undecodable_member",
            "label_spread_batches",
        }
        assert report.scanned["shards"] == len(shards) and report.scanned["samples"] == 40
    assert report.scanned["images_decoded"] == 40


# --- mixes ---------------------------------------------------------------------------------


def check_part(part):
    if isinstance(part, stoker.ShardDataset):
        return check_shards(part, progress=False)
    return CheckReport(dataset=str(part), kind="other")


def test_a_key_one_dataset_lacks_is_padded_info_naming_the_datasets(tmp_path, jpeg):
    samples = [(k, {**f, "txt": b"a caption"}) for k, f in image_samples(jpeg, ["a", "b", "c"])]
    samples[1][1].pop("cls")
    with_caption = stoker.ShardDataset(
        write_tar(tmp_path / "a.tar", samples), {**SPEC, "caption": stoker.Text()}
    )
    plain = stoker.ShardDataset(write_tar(tmp_path / "b.tar", image_samples(jpeg, ["d"])), SPEC)
    report = check_mix(
        stoker.MultiDataset([with_caption, plain]),
        deep=False,
        progress=False,
        check_part=check_part,
    )
    assert report.kind == "mix" and report.scanned["datasets"] == 2
    padded = only(report, "mix_padded_key")
    assert (padded.severity, padded.key, padded.dataset) == ("info", "caption", 1)
    assert "dataset 0 only; dataset 1 gives zeros" in padded.message
    # The part's own finding comes tagged with its place in the mix.
    missing = only(report, "missing_field")
    assert (missing.dataset, missing.key) == (0, "b")
    assert report.by_check("mix_key_clash") == []
    # A near-twin name is a warning: one key spelled two ways.
    capital = stoker.ShardDataset(
        write_tar(tmp_path / "c.tar", samples), {**SPEC, "Caption": stoker.Text()}
    )
    report = check_mix(
        stoker.MultiDataset([with_caption, capital]),
        deep=False,
        progress=False,
        check_part=check_part,
    )
    twin = only(report, "mix_padded_key")
    assert twin.severity == "warning"
    assert "'caption'" in twin.message and "'Caption'" in twin.message


def test_a_dtype_or_shape_clash_is_an_error_as_the_loader_refuses_it(tmp_path, jpeg):
    samples = [
        (k, {**f, "json": json.dumps({"label": 0.5}).encode()})
        for k, f in image_samples(jpeg, ["a", "b"])
    ]
    url = write_tar(tmp_path / "a.tar", samples)
    ints = stoker.ShardDataset(url, SPEC)
    floats = stoker.ShardDataset(
        url, {"image": stoker.Image(size=(48, 32)), "meta": stoker.Json(keys={"label": "float64"})}
    )
    mix = stoker.MultiDataset([ints, floats], weights=[1, 0])
    report = check_mix(mix, deep=False, progress=False, check_part=check_part)
    clashes = {f.key: f for f in report.by_check("mix_key_clash")}
    assert set(clashes) == {"image", "label"} and not report.ok
    assert clashes["label"].expected == "int64 () (dataset 0)"
    assert clashes["label"].found == "float64 () (dataset 1)" and "dtype" in clashes["label"].fix
    assert "uint8 (3, 48, 32)" in clashes["image"].message and "size" in clashes["image"].fix
    assert only(report, "mix_weights").dataset == 1
    with pytest.raises(stoker.DatasetError, match="disagree"):
        stoker.Loader(mix, batch_size=2)


def test_a_lerobot_dataset_mixed_with_shards_pads_each_ones_keys(lerobot_v21, tmp_path, jpeg):
    robot = stoker.LeRobotDataset(lerobot_v21.root, image_dtype="uint8", progress=False, output="numpy")
    shards = stoker.ShardDataset(write_tar(tmp_path / "a.tar", image_samples(jpeg, ["a"])), SPEC)
    report = check_mix(
        stoker.MultiDataset([robot, shards]), deep=False, progress=False, check_part=check_part
    )
    padded = {f.key: f.dataset for f in report.by_check("mix_padded_key")}
    assert padded["image"] == 0 and padded["action"] == 1
    assert report.ok, str(report)
    assert all(f.severity == "info" for f in report.findings), str(report)
    # LeRobot's float32 frames beside the shards' uint8 images: the mix's error, by name.
    robot = stoker.LeRobotDataset(lerobot_v21.root, progress=False, output="numpy")
    report = check_mix(
        stoker.MultiDataset([robot, shards]), deep=False, progress=False, check_part=check_part
    )
    (error,) = [f for f in report.findings if f.severity == "error"]
    assert error.check == "mix_schema" and "Transforms(dtype='uint8')" in error.message


# --- shards given without a spec, and through stoker.check ---------------------------------


def test_shards_given_by_pattern_are_checked_with_an_inferred_spec(tmp_path, jpeg):
    samples = image_samples(jpeg, [f"k{i:02d}" for i in range(10)])
    del samples[6][1]["cls"]
    samples[2][1]["jpg"] = b"GIF89a not supported"
    url = write_tar(tmp_path / "a.tar", samples)
    write_tar(tmp_path / "b.tar", image_samples(jpeg, ["z0", "z1"]))
    report = check_shards(str(tmp_path / "*.tar"), progress=False)
    spec = only(report, "spec")
    assert spec.severity == "info" and spec.found == "jpg (Image), cls (Label)"
    missing = only(report, "missing_field")
    assert (missing.shard, missing.key, missing.field) == (url, "k06", "cls")
    assert only(report, "undecodable_member").key == "k02"
    assert report.checks[0] == "spec"


def test_stoker_check_dispatches_shards_and_mixes_here(tmp_path, jpeg):
    from stoker.checks import check as stoker_check

    samples = image_samples(jpeg, [f"k{i}" for i in range(6)])
    samples[1][1]["jpg"] = jpeg[:100]
    good = stoker.ShardDataset(write_tar(tmp_path / "a.tar", image_samples(jpeg, ["g"])), SPEC)
    bad = stoker.ShardDataset(write_tar(tmp_path / "b.tar", samples), SPEC)
    report = stoker_check(bad, deep=True, progress=False)
    assert report.kind == "shards" and only(report, "undecodable_member").key == "k1"
    report = stoker_check(stoker.MultiDataset([good, bad]), deep=True, progress=False)
    assert report.kind == "mix" and not report.ok
    finding = only(report, "undecodable_member")
    assert (finding.dataset, finding.key) == (1, "k1")
