"""`facefuse` command line: parsing and printing only; every command calls the library.

Each sub-command lives in its own module with a ``register(subparsers)`` function; errors are translated through
the one table in :mod:`facefuse.errors` (exit 0 ok, 2 usage, 3 input rejected, 4 model missing, 5 service).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from typing import Callable, Sequence

from ..errors import ErrorCode, FacefuseError
from . import batch_cmd, detect_cmd, fuse_cmd, gpu_cmd, models_cmd, optimize_cmd, serve_cmd, train_cmd, video_cmd

COMMAND_MODULES = [detect_cmd, fuse_cmd, batch_cmd, video_cmd, models_cmd, serve_cmd, optimize_cmd, gpu_cmd, train_cmd]


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors in the same shape as every other error when --json is given."""

    def error(self, message: str) -> None:  # type: ignore[override]
        if "--json" in sys.argv:
            print(json.dumps({"error": {"code": ErrorCode.INVALID_OPTION.value, "message": message,
                                        "hint": f"see `{self.prog} --help`", "details": {}}}))
            raise SystemExit(2)
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="facefuse", description="Offline face fusion: library, CLI, HTTP service, model toolkit.",
                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    as_json = bool(getattr(args, "json", False))
    # Damaged-but-readable photos make Pillow warn; the command's own one-line verdict is what a person needs.
    warnings.simplefilter("ignore")
    try:
        return handler(args)
    except FacefuseError as exc:
        report_error(exc, as_json)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the promise is "never a traceback": say what broke, keep the trace for debugging
        if os.environ.get("FACEFUSE_DEBUG"):
            raise
        report_error(FacefuseError(ErrorCode.INTERNAL, f"unexpected {type(exc).__name__}: {exc}",
                                   "set FACEFUSE_DEBUG=1 for the full trace and report it"), as_json)
        return 1


def report_error(exc: FacefuseError, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"error": exc.to_dict()}))
    else:
        print(f"error: {exc}", file=sys.stderr)

