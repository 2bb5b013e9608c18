"""`facefuse models list|pull|verify|path`: what models exist, fetching them, checking the cache, locating a file.

Everything reads the one registry (:mod:`facefuse.models.registry`) and goes through :class:`ModelStore`, so the
CLI never has its own idea of where a model lives or whether its bytes are good.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..config import StoreConfig
from ..errors import ErrorCode, FacefuseError
from ..models import ModelEntry, ModelStore, PackageSource, VerifyResult


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("models", help="list, pull, verify and locate the model files",
                                   description=__doc__)
    actions = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))

    listing = actions.add_parser("list", help="every known model: task, size, licence, cached or not")
    listing.add_argument("--json", action="store_true", help="print machine-readable JSON")
    listing.set_defaults(handler=run_list)

    pull = actions.add_parser("pull", help="fetch models into the cache (mirror first, then the network)")
    pull.add_argument("names", nargs="*", metavar="NAME", help="models to fetch")
    which = pull.add_mutually_exclusive_group()
    which.add_argument("--default", action="store_true", help="the models the default pipeline needs")
    which.add_argument("--all", action="store_true", help="every known model")
    pull.add_argument("--json", action="store_true", help="print machine-readable JSON")
    pull.set_defaults(handler=run_pull)

    verify = actions.add_parser("verify", help="re-hash every cached model; exit 4 when one is corrupt")
    verify.add_argument("--json", action="store_true", help="print machine-readable JSON")
    verify.set_defaults(handler=run_verify)

    path = actions.add_parser("path", help="the verified local file of a model (fetched first if needed)")
    path.add_argument("name", metavar="NAME")
    path.add_argument("--json", action="store_true", help="print machine-readable JSON")
    path.set_defaults(handler=run_path)


def _store() -> ModelStore:
    return ModelStore(StoreConfig.from_env())


def entry_row(entry: ModelEntry, state: VerifyResult) -> dict[str, Any]:
    size = entry.size if entry.size is not None else (state.path.stat().st_size if state.path.is_file() else None)
    return {"name": entry.name, "task": entry.task.value, "size": size, "licence": entry.licence_note,
            "commercial_use": entry.commercial_use, "default": entry.default, "status": state.status,
            "cached": state.status in ("ok", "unverified"), "shipped": isinstance(entry.source, PackageSource),
            "path": str(state.path),
            "source": entry.source.describe(), "input": entry.input.describe(), "description": entry.description}


def _size_text(size: int | None) -> str:
    return "?" if size is None else f"{size / 1e6:.1f} MB"


def run_list(args: argparse.Namespace) -> int:
    store = _store()
    entries = [entry for entry in store.registry if "@" not in entry.name] + store.installed_variants()
    rows = [entry_row(entry, store.verify(entry.name)) for entry in entries]
    if args.json:
        print(json.dumps({"cache_dir": str(store.cache_dir), "models": rows}))
        return 0
    width = max(len(row["name"]) for row in rows)
    print(f"{'NAME':<{width}}  {'TASK':<10}  {'SIZE':>8}  {'CACHED':<9}  {'USE':<14}  LICENCE")
    for row in rows:
        status = row["status"] if not row["cached"] else "shipped" if row["shipped"] else "yes"
        use = "any" if row["commercial_use"] else "NON-COMMERCIAL"
        default = " [default]" if row["default"] else ""
        print(f"{row['name']:<{width}}  {row['task']:<10}  {_size_text(row['size']):>8}  {status:<9}  {use:<14}  "
              f"{row['licence']}{default}")
    print(f"cache: {store.cache_dir}")
    if any(not row["commercial_use"] for row in rows):
        print("NON-COMMERCIAL models may only be used for non-commercial research; "
              "set FACEFUSE_ALLOW_NONCOMMERCIAL_MODELS=0 to keep the pipeline off them")
    return 0


def run_pull(args: argparse.Namespace) -> int:
    store = _store()
    if args.all:
        names = store.registry.names()
    elif args.default or not args.names:
        names = [entry.name for entry in store.registry.defaults()]
    else:
        names = args.names
    for name in names:
        store.registry.get(name)  # unknown names fail before anything is fetched
    results: list[dict[str, Any]] = []
    first_error: FacefuseError | None = None
    for name in names:
        try:
            path = store.ensure(name)
            results.append({"name": name, "path": str(path), "sha256": store.verify(name).sha256})
            if not args.json:
                print(f"{name}: {path}")
        except FacefuseError as exc:
            first_error = first_error or exc
            results.append({"name": name, "error": exc.to_dict()})
            if not args.json:
                print(f"error: {exc}", file=sys.stderr)
    if args.json:
        print(json.dumps({"models": results}))
    return first_error.exit_code if first_error else 0


def run_verify(args: argparse.Namespace) -> int:
    store = _store()
    states = [store.verify(name, rehash=True) for name in store.registry.names()]
    if args.json:
        print(json.dumps({"models": [{"name": s.name, "status": s.status, "path": str(s.path), "sha256": s.sha256}
                                     for s in states]}))
    else:
        width = max(len(state.name) for state in states)
        for state in states:
            print(f"{state.name:<{width}}  {state.status:<10}  {state.path}")
    corrupt = [s.name for s in states if s.status == "corrupt"]
    if corrupt:
        error = FacefuseError(ErrorCode.MODEL_CORRUPT, f"corrupt cached model(s): {', '.join(corrupt)}",
                              f"run `facefuse models pull {' '.join(corrupt)}` to replace them", {"models": corrupt})
        if not args.json:
            print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    return 0


def run_path(args: argparse.Namespace) -> int:
    path = _store().ensure(args.name)
    print(json.dumps({"name": args.name, "path": str(path)}) if args.json else path)
    return 0
