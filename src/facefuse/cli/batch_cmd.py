"""`facefuse batch`: one source face into many photos (files and folders), with a progress bar.

The work is :func:`facefuse.jobs.fuse_photos`, the same code the service's batch jobs run: outputs are numbered
in input order (``0001-name.jpg``), each written whole, and a photo that fails is reported without stopping the rest.
Exit code: 0 when every photo was fused, otherwise that of the first failure (3 for a rejected photo).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from ..errors import ErrorCode, FacefuseError
from ..fusion.engine import FusionOptions
from ..imageio import PHOTO_SUFFIXES, output_format
from ..jobs import PhotoTask, fuse_photos
from ..pipeline import EncodeOptions, Fuser
from .fuse_cmd import add_source_flag, add_swapper_flags, config_with_swapper, sources_from_args
from .options import add_fuser_options, add_model_flags, model_from_args



def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("batch", help="fuse a source face into many photos",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_flag(parser)
    parser.add_argument("--targets", required=True, nargs="+",
                        help="photos, and folders whose photos (by extension, sorted, subfolders included) are used")
    parser.add_argument("--out-dir", required=True, type=Path, help="folder for the results (created if missing)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary instead of the progress bar")
    add_model_flags(parser, FusionOptions, "fusion options")
    add_model_flags(parser, EncodeOptions, "output")
    add_swapper_flags(parser)
    add_fuser_options(parser)
    parser.set_defaults(handler=run)


def collect_targets(given: list[str]) -> list[PhotoTask]:
    """Files as given (a non-photo becomes that item's error), folders expanded to their photos."""
    paths: list[Path] = []
    for name in given:
        path = Path(name)
        if path.is_dir():
            paths.extend(sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in PHOTO_SUFFIXES))
        elif path.is_file():
            paths.append(path)
        else:
            raise FacefuseError(ErrorCode.BAD_REQUEST, f"no such file or folder: {name}",
                                "check the --targets paths", {"path": name})
    if not paths:
        raise FacefuseError(ErrorCode.BAD_REQUEST, "no photos found in --targets",
                            "name photo files, or folders that hold .jpg/.png/.webp photos")
    return [PhotoTask(i, p.name, p) for i, p in enumerate(paths)]


def run(args: argparse.Namespace) -> int:
    tasks = collect_targets(args.targets)
    options: FusionOptions = model_from_args(FusionOptions, args)
    encoding: EncodeOptions = model_from_args(EncodeOptions, args)
    fmt = output_format(encoding.output_format or "jpeg")
    fuser = Fuser(config_with_swapper(args))
    done: list[dict[str, object]] = []
    failed: list[tuple[PhotoTask, FacefuseError]] = []
    bar = tqdm(total=len(tasks), unit="photo", desc="fusing", disable=args.json or None, file=sys.stderr)

    def on_item(task: PhotoTask, output: str | None, error: FacefuseError | None) -> None:
        if error is None:
            done.append({"target": str(task.path), "output": str(args.out_dir / str(output))})
        else:
            failed.append((task, error))
            bar.write(f"{task.path}: {error}", file=sys.stderr)
        bar.update()

    try:
        fuse_photos(fuser, sources_from_args(args), tasks, args.out_dir, options, fmt, encoding.quality, on_item)
    finally:
        bar.close()
    if args.json:
        print(json.dumps({"done": done, "failed": [{"target": str(t.path), "error": e.to_dict()} for t, e in failed]}))
    else:
        print(f"wrote {len(done)} of {len(tasks)} photos to {args.out_dir}" +
              (f"; {len(failed)} failed" if failed else ""))
    return failed[0][1].exit_code if failed else 0
