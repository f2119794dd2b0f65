"""Issue 33, "Errors a new user meets": the first mistakes a newcomer makes (pickling a Loader,
handing it to a DataLoader, giving it a list, ...) end with a message that says what stoker
expects and what to do, never with an internal name."""

import io
import pickle
import tarfile

import numpy as np
import pytest
from PIL import Image as PILImage

import stoker

FPS = 30
TOP = "observation.images.top"


@pytest.fixture
def shard_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))


def write_shard(path, n=4):
    """A shard of n samples: a 40x30 JPEG and a label each."""
    with tarfile.open(path, "w") as tar:
        for k in range(n):
            out = io.BytesIO()
            pixels = np.random.default_rng(k).integers(0, 255, (30, 40, 3), np.uint8)
            PILImage.fromarray(pixels).save(out, "JPEG")
            for field, data in (("jpg", out.getvalue()), ("cls", str(k % 2).encode())):
                info = tarfile.TarInfo(f"s{k:03d}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


def every_kind(lerobot_v21, tmp_path):
    robot = stoker.LeRobotDataset(lerobot_v21.root, delta_timestamps={TOP: [0.0]},
                                  image_dtype="uint8", progress=False, output="numpy")
    shards = stoker.ShardDataset(write_shard(tmp_path / "a.tar"),
                                 {"image": stoker.Image(size=(64, 64)), "label": stoker.Label()})
    return {"lerobot": robot, "shards": shards, "mix": stoker.MultiDataset([robot, shards])}


# ---- 8: a Loader is the iterator, not a Dataset ------------------------------------------------

def test_pickling_a_loader_says_it_is_the_iterator_and_to_pass_the_dataset(
        lerobot_v21, tmp_path, shard_cache):
    """Was `cannot pickle 'EpisodeIndex' object` (or nb_func, WindowKey, ShardField)."""
    for kind, dataset in every_kind(lerobot_v21, tmp_path).items():
        loader = stoker.Loader(dataset, batch_size=2, output="numpy")
        with pytest.raises(TypeError, match="iterator itself.*not a Dataset") as raised:
            pickle.dumps(loader)
        assert "own stoker.Loader from the dataset, which pickles" in str(raised.value), kind
        pickle.dumps(dataset)  # what to pass instead does pickle


@pytest.mark.parametrize("workers", [0, 2])
def test_a_torch_dataloader_over_a_loader_says_to_iterate_the_loader(lerobot_v21, workers):
    """Was `TypeError: 'Loader' object is not subscriptable` (fork) or a pickling error."""
    torch = pytest.importorskip("torch")
    dataset = stoker.LeRobotDataset(lerobot_v21.root, progress=False, output="numpy")
    loader = stoker.Loader(dataset, batch_size=2, output="numpy")
    wrapped = torch.utils.data.DataLoader(loader, num_workers=workers)
    with pytest.raises(TypeError, match=r"iterator itself.*not a\s+Dataset.*for batch in loader"):
        next(iter(wrapped))


# ---- 9: what a Loader reads --------------------------------------------------------------------

@pytest.mark.parametrize("what", [[1, 2, 3], np.zeros(4), "path/to/dataset"])
def test_a_loader_of_something_else_names_the_dataset_kinds_it_reads(what):
    """Was `AttributeError: 'list' object has no attribute 'spec'`."""
    with pytest.raises(TypeError, match="stoker.LeRobotDataset, a stoker.ShardDataset or a "
                                        "stoker.MultiDataset"):
        stoker.Loader(what, batch_size=2)


def test_a_loader_of_a_loader_says_to_give_the_dataset(lerobot_v21):
    dataset = stoker.LeRobotDataset(lerobot_v21.root, progress=False, output="numpy")
    inner = stoker.Loader(dataset, batch_size=2, output="numpy")
    with pytest.raises(TypeError, match="give it the dataset it was made from"):
        stoker.Loader(inner, batch_size=2)


# ---- 15: public names stay --------------------------------------------------------------------

def test_each_integration_keeps_its_short_name():
    """`stoker.ray` became `stoker.integrations.ray` without an alias, and code written against
    the first name broke. Both names now give the same objects."""
    import stoker.integrations.ray
    import stoker.integrations.torchdata
    import stoker.ray
    import stoker.torchdata

    for name in stoker.integrations.ray.__all__:
        assert getattr(stoker.ray, name) is getattr(stoker.integrations.ray, name)
    assert stoker.torchdata.loader_node is stoker.integrations.torchdata.loader_node


@pytest.mark.parametrize("old, new, name", [("stoker.adapters", "stoker.torchdata", "loader_node"),
                                            ("stoker.etl", "stoker.writers.etl", "materialize")])
def test_a_renamed_public_module_warns_under_its_old_name(old, new, name):
    import importlib
    import sys

    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import {new}"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)


def test_importing_stoker_imports_neither_ray_nor_torch():
    import subprocess
    import sys

    code = ("import sys, stoker, stoker.torchdata; "
            "print(sorted(m for m in ('ray', 'torch', 'torchdata') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_every_stoker_name_the_docs_give_resolves():
    """A name the README or docs/ write as `stoker.a.b` is a promise: renaming it without an
    alias breaks this test before it breaks a user."""
    import importlib
    import pathlib
    import re

    top = pathlib.Path(__file__).resolve().parents[2]
    broken = []
    for page in [top / "README.md", *sorted((top / "docs").glob("*.md"))]:
        for name in sorted(set(re.findall(r"`(stoker(?:\.[A-Za-z_]\w*)+)", page.read_text()))):
            parts = name.split(".")
            for i in range(len(parts), 0, -1):
                try:
                    value = importlib.import_module(".".join(parts[:i]))
                    break
                except ImportError:
                    continue
            for attribute in parts[i:]:
                value = getattr(value, attribute, None)
            if value is None:
                broken.append(f"{page.name}: {name}")
    assert not broken, broken


# ---- 14: public exceptions live in stoker ------------------------------------------------------

def test_every_exception_is_named_where_it_is_exported_and_pickles():
    """Tracebacks said `stoker._core.DatasetError`, a private module's name."""
    errors = [getattr(stoker, name) for name in stoker.__all__
              if isinstance(getattr(stoker, name), type)
              and issubclass(getattr(stoker, name), BaseException)]
    assert {e.__name__ for e in errors} >= {"Error", "DecodeError", "DatasetError",
                                            "InvalidArgumentError", "ResourceError"}
    for error in errors:
        assert error.__module__ == "stoker", error
        assert repr(error) == f"<class 'stoker.{error.__name__}'>"
        again = pickle.loads(pickle.dumps(error("sample 3: bad frame")))
        assert type(again) is error and str(again) == "sample 3: bad frame"
    with pytest.raises(stoker.DatasetError) as raised:
        stoker._core._raise_status(3, False, "x")  # corrupt data, as the engine raises it
    assert type(raised.value).__module__ == "stoker"


# ---- 16: what a newcomer sees first ------------------------------------------------------------

def test_stoker_help_is_plain_text_and_whole(capsys):
    """`stoker --help` showed RST double backticks, cut after a trailing comma."""
    from stoker.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    description = out.split("\n\n")[1]
    assert "``" not in out and description.rstrip().endswith("."), description
    for command in ("check", "doctor", "etl", "index", "shard"):
        assert command in description


def test_the_doctors_configuration_of_shards_names_no_camera():
    from stoker.doctor.command import spec_summary

    assert "camera" not in spec_summary("train-{000..003}.tar", None)
    assert "image" in spec_summary("train-{000..003}.tar", None)
    assert "camera" in spec_summary("path/to/lerobot", None)


def test_a_check_headline_of_several_shards_says_shards_once(tmp_path, shard_cache):
    """Was `stoker check a.tar .. d.tar (4 shards) (shards): ...`."""
    urls = [write_shard(tmp_path / f"{k}.tar") for k in range(4)]
    report = stoker.check(urls, progress=False)
    headline = str(report).splitlines()[0]
    assert "(4 shards)" not in headline and headline.count("(shards)") == 1, headline
    assert "over 4 shards" in headline, headline


def test_a_progress_bar_draws_its_last_line_once():
    """`--deep` printed `1500/1500` twice."""
    from stoker.progress import ProgressBar

    out = io.StringIO()
    bar = ProgressBar("decoding", stream=out)
    for done in (500, 1500, 1500):
        bar(done, 1500)
    bar.close()
    assert out.getvalue().count("1500/1500") == 1


def test_opening_a_dataset_with_new_cameras_prints_nothing(lerobot_v21, lerobot_copy, capfd):
    """Each first open with new `cameras=` printed indexing lines to stderr; they are INFO logs
    now (the `stoker` command shows them)."""
    root = lerobot_copy(lerobot_v21)
    capfd.readouterr()
    for cameras in ([TOP], None):
        dataset = stoker.LeRobotDataset(root, cameras=cameras, output="numpy")
        next(iter(stoker.Loader(dataset, batch_size=2, output="numpy")))
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == "", captured
