"""`facefuse` command line: parsing and printing only; every command calls the library.

Each sub-command lives in its own module with a ``register(subparsers)`` function, imported only when that command
runs (or for ``--help``): ``facefuse fuse`` never loads the optimisation toolkit, Ray or the training code.
Errors are translated through the one table in :mod:`facefuse.errors` (exit codes included).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import warnings
from typing import Callable, Sequence

from ..allocator import keep_freed_memory
from ..errors import ERROR_TABLE, ErrorCode, FacefuseError

# command → the module that registers and runs it (imported on use)
COMMANDS = {"detect": "detect_cmd", "fuse": "fuse_cmd", "batch": "batch_cmd", "video": "video_cmd",
            "models": "models_cmd", "serve": "serve_cmd", "optimize": "optimize_cmd", "gpu": "gpu_cmd",
            "train": "train_cmd"}


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors in the same shape as every other error when --json is given."""

    def error(self, message: str) -> None:  # type: ignore[override]
        if "--json" in sys.argv:
            print(json.dumps({"error": {"code": ErrorCode.INVALID_OPTION.value, "message": message,
                                        "hint": f"see `{self.prog} --help`", "details": {}}}))
            raise SystemExit(2)
        super().error(message)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with ``command``'s sub-parser only (every command's when ``command`` is None: for help)."""
    parser = _Parser(prog="facefuse", description="Offline face fusion: library, CLI, HTTP service, model toolkit.",
                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, module in COMMANDS.items():
        if command in (None, name):
            importlib.import_module(f"{__name__}.{module}").register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    command = next((word for word in given if not word.startswith("-")), None)
    parser = build_parser(command if command in COMMANDS else None)
    args = parser.parse_args(given)
    handler: Callable[[argparse.Namespace], int] = args.handler
    as_json = bool(getattr(args, "json", False))
    keep_freed_memory()  # this process is the command's own (see facefuse.allocator)
    try:
        with warnings.catch_warnings():
            # Damaged-but-readable photos make Pillow warn; the command's own one-line verdict is what a person
            # needs. Scoped to the command and to Pillow: nothing else's warnings are hidden.
            warnings.filterwarnings("ignore", module="PIL")
            return handler(args)
    except FacefuseError as exc:
        report_error(exc, as_json)
        return exc.exit_code
    except KeyboardInterrupt:
        return ERROR_TABLE[ErrorCode.CANCELLED].exit_code
    except Exception as exc:  # the promise is "never a traceback": say what broke, keep the trace for debugging
        if os.environ.get("FACEFUSE_DEBUG"):
            raise
        error = FacefuseError(ErrorCode.INTERNAL, f"unexpected {type(exc).__name__}: {exc}",
                              "set FACEFUSE_DEBUG=1 for the full trace and report it")
        report_error(error, as_json)
        return error.exit_code


def report_error(exc: FacefuseError, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"error": exc.to_dict()}))
    else:
        print(f"error: {exc}", file=sys.stderr)

