"""`facefuse detect IMAGE`: the faces of one photo with box, score, pose and quality verdict.

Prints one line per face (or the analysis as JSON with ``--json``); ``--draw`` writes the photo with what was
found drawn on it. Exits 3 with the quality gate's code when no chosen face passes the gate, so scripts can use
``detect`` as a pre-flight check for ``fuse``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import cv2

from ..analysis.draw import draw_analysis
from ..analysis.types import Face, ImageAnalysis
from ..errors import ErrorCode, FacefuseError
from ..pipeline import Fuser
from .options import add_fuser_options, fuser_config


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("detect", help="find faces, landmarks, pose and quality verdicts in a photo",
                                   description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("image", help="photo file (JPEG, PNG, WebP, BMP, TIFF, PGM)")
    parser.add_argument("--json", action="store_true", help="print the analysis as JSON")
    parser.add_argument("--draw", metavar="OUT.png", default=None,
                        help="write the photo with boxes, landmarks and pose axes drawn on it")
    parser.add_argument("--face", default="all",
                        help="which face must pass the quality gate: largest, all, or an index counted left to right")
    parser.add_argument("--no-landmarks", action="store_true", help="leave the 468 landmarks out of the JSON")
    add_fuser_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    fuser = Fuser(fuser_config(args))
    loaded = time.perf_counter()
    record = fuser.detect(args.image, args.face)
    analysis = record.analysis
    assert analysis is not None
    total_ms, load_ms = (time.perf_counter() - loaded) * 1000, (loaded - started) * 1000
    if args.draw:
        write_drawing(analysis, Path(args.draw))
    if record.refusal is not None:
        raise record.refusal  # the gate's verdict: exit 3, after --draw was written
    indices = [analysis.faces.index(target.found) for target in record.faces]
    if args.json:
        report: dict[str, Any] = analysis.to_dict(with_landmarks=not args.no_landmarks)
        report["timings_ms"].update(total=round(total_ms, 2), load_models=round(load_ms, 2))
        report["selected"] = indices
        print(json.dumps(report))
    else:
        for index, face in enumerate(analysis.faces):
            print(describe_face(index, face, index in indices))
        if analysis.rotation:
            print(f"faces were found with the photo turned {analysis.rotation}° clockwise")
    return 0


def describe_face(index: int, face: Face, selected: bool) -> str:
    x, y, w, h = (round(v) for v in face.box)
    pose = face.pose
    angles = f"yaw {pose.yaw:+.1f}° pitch {pose.pitch:+.1f}° roll {pose.roll:+.1f}°" if pose else "pose unknown"
    verdict = "ok" if face.accepted else "; ".join(f"{i.code}: {i.message}" for i in face.issues)
    marker = "*" if selected else " "
    return f"{marker}face {index}: box {x},{y} {w}x{h}  score {face.score:.2f}  {angles}  {verdict}"


def write_drawing(analysis: ImageAnalysis, path: Path) -> None:
    """A plain annotated picture (not a fusion result, so it carries no AI-generated label)."""
    pixels = draw_analysis(analysis)
    try:
        ok = cv2.imwrite(str(path), cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR))
    except cv2.error:
        ok = False
    if not ok:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"cannot write the drawing to {path}",
                            "give a writable path ending in .png or .jpg", {"path": str(path)})
