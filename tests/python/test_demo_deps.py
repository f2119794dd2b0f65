"""`make demo` installs only requirements-demo.txt (issue 24: it installed the tests' 6.4 GB):
the demo script and the doctor it runs work without the packages only the tests need, and the
demo's imports exist (it imported a private name the package no longer has)."""

import os
import re
import subprocess
import sys

import lerobot_datasets

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
DEMO = os.path.join(ROOT, "demo", "doctor_demo.py")
CAMERAS = ("observation.images.front", "observation.images.wrist")

# A finder that refuses every package of requirements-dev.txt that requirements-demo.txt does
# not have (and what comes with them), as a .venv that `make demo` made would.
BLOCKER = """
import importlib.abc, sys
TESTS_ONLY = {blocked!r}
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in TESTS_ONLY:
            raise ImportError(f"{{name}} is not in requirements-demo.txt")
        return None
sys.meta_path.insert(0, Refuse())
"""


def requirement_names(path):
    names = set()
    for line in open(path):
        line = line.split("#")[0].strip()
        if line and not line.startswith("-r"):
            names.add(re.split(r"[\[<>=!~ ]", line)[0].lower())
    return names


def test_the_demo_set_is_in_the_test_set_and_has_no_pytorch():
    demo = requirement_names(os.path.join(ROOT, "requirements-demo.txt"))
    dev_text = open(os.path.join(ROOT, "requirements-dev.txt")).read()
    assert "-r requirements-demo.txt" in dev_text  # make test keeps the full set
    assert {"numpy", "pyarrow", "nanobind", "matplotlib"} <= demo
    assert not demo & {"torch", "ray", "moto", "mypy", "ruff", "torchdata"}, demo


def test_the_demo_and_its_doctor_run_without_the_tests_packages(tmp_path):
    written = lerobot_datasets.write_v30(tmp_path / "ds", [60] * 2, CAMERAS, fps=30,
                                         codec="h264", size=(96, 128))
    blocked = sorted({"torch", "torchdata", "ray", "moto", "boto3", "av", "webdataset",
                      "mypy", "ruff", "pytest"})
    script = BLOCKER.format(blocked=blocked) + f"""
import importlib.util
spec = importlib.util.spec_from_file_location("doctor_demo", {DEMO!r})
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)  # its imports, without running it
assert callable(demo.main) and callable(demo.make_dataset)
from stoker.cli import main
sys.exit(main(["doctor", {written.root!r}, "--batch-size", "4", "--quick", "--budget", "1.5",
               "--step-ms", "5", "--no-sweep", "--report", {str(tmp_path / "r")!r}]))
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "-bound" in done.stdout and "Report:" in done.stdout, done.stdout
    assert os.path.getsize(tmp_path / "r" / "rates.png") > 0  # matplotlib is in the demo's set
