"""`facefuse video`: the source face into every frame of a clip, with a progress bar (tqdm's: frames, rate, ETA)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from ..fusion.engine import FusionOptions
from ..pipeline import Fuser
from ..runtime import size_opencv_pool
from ..video import VideoOptions, VideoProgress
from .fuse_cmd import add_fusion_flags, config_with_swapper, sources_from_args
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
    from ..video.fuse import fuse_video, fuse_workers

    size_opencv_pool(fuse_workers())  # this process is the command's own (facefuse.runtime)
    options: FusionOptions = model_from_args(FusionOptions, args)
    video: VideoOptions = model_from_args(VideoOptions, args)
    fuser = Fuser(config_with_swapper(args))
    bars: list[tqdm] = []  # made at the first report, so an input rejected at once prints no empty bar

    def progress(report: VideoProgress) -> None:
        if args.json:
            return
        if not bars:
            # counting starts at the first report's frames (those a resumed run skipped, or the first second's):
            # tqdm's rate and ETA then cover only frames it saw being fused, not a jump from 0 in no time
            bars.append(tqdm(total=report.frames_total, initial=report.frames_done, unit="frame",
                             dynamic_ncols=True, file=sys.stderr, desc="fusing"))
            return
        bar = bars[0]
        if report.frames_total != bar.total:  # the container's estimate, corrected once the last frame is read
            bar.total = report.frames_total
        bar.update(report.frames_done - bar.n)

    try:
        result = fuse_video(sources_from_args(args), Path(args.target), Path(args.output), options, video, fuser=fuser,
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
