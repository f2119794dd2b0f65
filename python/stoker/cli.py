"""The ``stoker`` command: ``stoker check ...``, ``stoker doctor ...``, ``stoker etl ...``,
``stoker index ...`` and ``stoker shard ...``.

Each subcommand lives in its own module, which provides ``add_arguments(parser)`` and
``main(args) -> int``; this file dispatches, and says how a command that writes a folder
reports failing (:func:`report_errors`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys
from collections.abc import Callable, Iterator

# subcommand -> (module, one-line help)
COMMANDS = {
    "check": (
        "stoker.checks.command",
        "find what is wrong with a dataset (frames, timestamps, metadata, decoding)",
    ),
    "doctor": ("stoker.doctor", "measure which roofline bounds training, and say what to change"),
    "etl": (
        "stoker.writers.etl",
        "materialize a dataset at training resolution, with typed columns",
    ),
    "index": (
        "stoker.datasets.lerobot.index_command",
        "build a dataset's episode index ahead of a job, where its ranks find it",
    ),
    "shard": ("stoker.writers.shards", "write samples into tar shards of equal bytes, shuffled"),
}


# What `stoker --help` says first: plain text (argparse shows it as written).
DESCRIPTION = (
    "stoker's commands: check a dataset, measure which roofline bounds training (doctor), "
    "materialize a dataset at training size (etl), build its index ahead of a job (index), "
    "write tar shards (shard). `stoker COMMAND --help` describes each."
)


def report_errors(command: str, run: Callable[[], object]) -> int:
    """Runs ``run`` for ``stoker <command>`` and gives its exit status: 0 when it ends; 1 with
    ``stoker <command>: error: <why>`` on stderr when it fails on bad input or on the system
    (a full disk, a destination another run is writing), with no traceback; 130 on Ctrl-C.
    Other exceptions (bugs) keep their traceback."""
    from stoker._core import Error

    try:
        run()
    except KeyboardInterrupt:
        print(
            f"stoker {command}: interrupted; run the same command again to continue",
            file=sys.stderr,
        )
        return 130
    except (Error, ValueError, OSError) as e:
        print(f"stoker {command}: error: {e}", file=sys.stderr)
        return 1
    return 0


def _version() -> str:
    from stoker.version import __version__

    return __version__


@contextlib.contextmanager
def _logs_shown() -> Iterator[None]:
    """The library logs its progress and summaries at INFO (quiet by default); a command shows
    them on stderr while it runs, unless the application configured the ``stoker`` logger."""
    stoker_logger = logging.getLogger("stoker")
    if stoker_logger.handlers or stoker_logger.level != logging.NOTSET:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    stoker_logger.addHandler(handler)
    stoker_logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        stoker_logger.removeHandler(handler)
        stoker_logger.setLevel(logging.NOTSET)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="stoker", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"stoker {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    chosen = None
    for name, (module_name, summary) in COMMANDS.items():
        command = commands.add_parser(name, help=summary, description=summary)
        if argv and argv[0] == name:  # only the chosen command's module is imported
            chosen = importlib.import_module(module_name)
            chosen.add_arguments(command)
    args = parser.parse_args(argv)
    assert chosen is not None  # parse_args exits unless argv names a command
    with _logs_shown():
        return chosen.main(args)


if __name__ == "__main__":
    sys.exit(main())
