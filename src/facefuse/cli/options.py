"""Options shared by several commands, and how they become the library's configuration objects."""

from __future__ import annotations

import argparse

from ..analysis.detectors import DETECTOR_NAMES
from ..config import AnalysisConfig, QualityConfig, RuntimeConfig, StoreConfig
from ..models.registry import PRECISIONS
from ..pipeline import FuserConfig


def add_fuser_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models and runtime")
    group.add_argument("--providers", default=None,
                       help="comma-separated ONNX Runtime providers in order of preference (e.g. cuda,cpu); "
                            "default: the best installed")
    group.add_argument("--threads", type=int, default=0, help="CPU threads per model (0 = all cores)")
    group.add_argument("--detector", default=AnalysisConfig.detector,
                       help="face detector: " + ", ".join(DETECTOR_NAMES))
    group.add_argument("--precision", choices=PRECISIONS, default=AnalysisConfig.precision,
                       help="use the INT8/FP16 variants `facefuse optimize --install` made (FP32 where none passed)")
    group.add_argument("--no-rotate", action="store_true", help="do not retry turned 90/180/270° when no face is found")
    quality = parser.add_argument_group("quality gate")
    defaults = QualityConfig()
    quality.add_argument("--min-score", type=float, default=defaults.min_score, help="lowest detection confidence")
    quality.add_argument("--min-face", type=int, default=defaults.min_face_px, help="smallest face side in pixels")
    quality.add_argument("--max-yaw", type=float, default=defaults.max_yaw, help="largest |yaw| in degrees")
    quality.add_argument("--max-pitch", type=float, default=defaults.max_pitch, help="largest |pitch| in degrees")
    quality.add_argument("--min-sharpness", type=float, default=defaults.min_sharpness,
                         help="lowest Laplacian variance of the aligned face")


def fuser_config(args: argparse.Namespace) -> FuserConfig:
    providers = tuple(p for p in args.providers.split(",") if p) if args.providers else None
    return FuserConfig(
        store=StoreConfig(),
        runtime=RuntimeConfig(providers=providers, intra_op_threads=args.threads),
        analysis=AnalysisConfig(
            detector=args.detector,
            try_rotations=not args.no_rotate,
            precision=args.precision,
            quality=QualityConfig(min_score=args.min_score, min_face_px=args.min_face, max_yaw=args.max_yaw,
                                  max_pitch=args.max_pitch, min_sharpness=args.min_sharpness),
        ),
    )
