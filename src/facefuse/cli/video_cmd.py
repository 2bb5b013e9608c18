"""`facefuse video`: the source face into every frame of a clip, with a progress bar (frames, fps, ETA)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from ..fusion.engine import FusionOptions
from ..pipeline import Fuser
from ..video import VideoOptions, VideoProgress
from .fuse_cmd import add_fusion_flags, config_with_swapper
from .options import model_from_args


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("video", help="fuse a source face into every frame of a video",
                                 description="Fuse the source photo's face into a video clip: faces are tracked, "
                                             "smoothed over time and fused frame by frame; the audio is copied "
                                             "untouched. Every photo fusion option is a flag here too.")
    add_fusion_flags(parser, "the video clip (MP4, MOV, MKV, WebM…)",
                     "where to write the result (.mp4, .mov or .mkv)", (VideoOptions, "video options"))
    parser.add_argument("--workdir", type=Path, default=None,
                        help="folder for the encoded segments and checkpoint: run the same command again with the "
                             "same folder to resume an interrupted run")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # imported here: it loads FFmpeg's libraries, which the other commands never need
    from ..video.fuse import fuse_video

    options: FusionOptions = model_from_args(FusionOptions, args)
    video: VideoOptions = model_from_args(VideoOptions, args)
    fuser = Fuser(config_with_swapper(args))
    bars: list[tqdm] = []  # made at the first report, so an input rejected at once prints no empty bar

    def progress(report: VideoProgress) -> None:
        if args.json:
            return
        if not bars:
            bars.append(tqdm(unit="frame", dynamic_ncols=True, file=sys.stderr, desc="fusing"))
        bar = bars[0]
        bar.total = report.frames_total
        bar.n = report.frames_done
        bar.set_postfix_str(f"{report.fps:.1f} fps" + (f", ETA {report.eta_s:.0f} s" if report.eta_s else ""),
                            refresh=False)
        bar.refresh()

    try:
        result = fuse_video(Path(args.source), Path(args.target), Path(args.output), options, video, fuser=fuser,
                            progress=progress, workdir=args.workdir)
    finally:
        for bar in bars:
            bar.close()
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(f"wrote {result.output}: {result.frames} frames, {result.frames_fused} fused, "
              f"{result.fps:.1f} frames/s")
        for warning in result.warnings:
            print(f"warning: {warning}")
    return 0
