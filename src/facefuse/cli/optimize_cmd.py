"""`facefuse optimize MODEL`: INT8 or FP16 variant of a model, judged against FP32 on held-out photos.

MODEL is a registry name (blazeface_full, blazeface_short, facemesh, yunet, retinaface_mbnet025, mobilefacenet,
face_segmenter, restorer, a swapper) or an ONNX file together with --contract NAME. With --install a variant that
passed its report goes into the model cache as NAME@PRECISION, which `--precision` then selects at run time.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import onnx

from ..config import Precision, StoreConfig
from ..models import ModelStore
from ..optimize import Int8Options, OptimizeRequest, optimize_model
from ..optimize.quantize import METHODS, output_heads
from ..optimize.workflow import resolve_model


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("optimize", help="make INT8/FP16 variants of a model and judge them",
                                   description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("model", metavar="MODEL", help="registry name or ONNX file")
    parser.add_argument("--output", "-o", type=Path, default=None, help="where to write the variant "
                        "(default: MODEL.PRECISION.onnx in the current folder)")
    parser.add_argument("--precision", choices=[p.value for p in Precision.variants()], default=Precision.INT8.value)
    parser.add_argument("--calibration", type=Path, default=None,
                        help="folder of face photos; the pipeline makes each model's own inputs from them")
    parser.add_argument("--holdout", type=Path, default=None,
                        help="folder of photos for the quality report (default: every 5th calibration photo)")
    parser.add_argument("--method", choices=sorted(METHODS), default="minmax", help="INT8 calibration method (entropy: KL divergence as in TensorRT; about a minute per model)")
    parser.add_argument("--per-channel", action="store_true", help="one weight scale per output channel")
    parser.add_argument("--exclude", nargs="+", default=[], metavar="NODE", help="nodes to keep in float")
    parser.add_argument("--quantize-heads", action="store_true",
                        help="also quantise the output layers (kept in float by default)")
    parser.add_argument("--contract", default=None, help="registry model whose inputs a given file takes")
    parser.add_argument("--max-images", type=int, default=64, help="photos used from each folder")
    parser.add_argument("--runs", type=int, default=20, help="timed runs for the median latency")
    parser.add_argument("--report", type=Path, default=None, help="write the report as JSON here")
    parser.add_argument("--install", action="store_true", help="put a passing variant into the model cache")
    parser.add_argument("--force", action="store_true", help="install even when the report fails")
    parser.add_argument("--list-nodes", action="store_true", help="print the model's node names and exit")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    store = ModelStore(StoreConfig.from_env())
    request = OptimizeRequest(
        model=args.model, precision=Precision(args.precision), output=args.output, calibration=args.calibration,
        holdout=args.holdout, contract=args.contract,
        int8=Int8Options(args.method, args.per_channel, tuple(args.exclude), keep_heads=not args.quantize_heads),
        max_images=args.max_images, latency_runs=args.runs, install=args.install, force=args.force)
    if args.list_nodes:
        return list_nodes(request, store, args.json)
    report = optimize_model(request, store)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report.to_dict(), indent=2))
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.describe())
    if args.install and not report.installed and not args.json:
        print("not installed: the report failed (try --method entropy, --per-channel or --exclude; --force "
              "installs it anyway)")
    return 0


def list_nodes(request: OptimizeRequest, store: ModelStore, as_json: bool) -> int:
    _, path = resolve_model(request, store)
    model = onnx.load(str(path), load_external_data=False)
    heads = set(output_heads(model))
    rows = [{"name": node.name, "op": node.op_type, "head": node.name in heads} for node in model.graph.node]
    if as_json:
        print(json.dumps({"nodes": rows}))
    else:
        for row in rows:
            print(f"{row['name']}\t{row['op']}{'  (output head: float by default)' if row['head'] else ''}")
    return 0
