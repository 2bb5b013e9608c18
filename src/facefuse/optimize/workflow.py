"""`facefuse optimize` end to end: resolve the model, make inputs, convert, judge, install.

The model is a registry name (its pipeline contract is known) or a file with ``contract`` naming the registry
model whose inputs it takes. Calibration photos and held-out photos never overlap: without a held-out folder,
every fifth calibration photo is set aside for the report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from ..analysis.analyzer import FaceAnalyzer
from ..config import AnalysisConfig, Precision, RuntimeConfig
from ..errors import ErrorCode, FacefuseError
from ..fusion.swappers import SWAPPERS
from ..models import ModelStore, sha256_of
from ..models.registry import variant_name
from ..runtime import Runtime
from .calibration import load_samples, photo_paths, record_feeds
from .drivers import ModelKind, Sample, model_kind
from .fp16 import convert_fp16
from .quantize import Int8Options, check_excluded, quantize_int8
from .report import QualityReport, compare, paired_latency_ms

HOLDOUT_EVERY = 5


@dataclass(frozen=True)
class OptimizeRequest:
    model: str
    precision: Precision
    output: Path | None = None
    calibration: Path | None = None
    holdout: Path | None = None
    contract: str | None = None
    int8: Int8Options = field(default_factory=Int8Options)
    max_images: int = 64
    latency_runs: int = 20
    install: bool = False
    force: bool = False


def resolve_model(request: OptimizeRequest, store: ModelStore) -> tuple[str, Path]:
    """(registry name whose contract applies, path of the FP32 file)."""
    if request.model in store.registry:
        return request.model, store.ensure(request.model)
    path = Path(request.model)
    if not path.is_file():
        raise FacefuseError(ErrorCode.MODEL_MISSING, f"'{request.model}' is neither a known model nor a file",
                            "pass a registry name (`facefuse models list`) or the path of an ONNX file",
                            {"model": request.model})
    name = request.contract or _known_by_hash(path, store)
    if name is None:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"{path.name} is not a file the registry knows",
                            "say which pipeline model's inputs it takes with --contract NAME (e.g. blazeface_full)",
                            {"path": str(path)})
    if name not in SWAPPERS:  # a swapper file is checked against its engine's own signature when it is loaded
        _check_same_inputs(path, store.ensure(name), name)
    return name, path


def _known_by_hash(path: Path, store: ModelStore) -> str | None:
    digest = sha256_of(path)
    for entry in store.registry:
        if entry.sha256 == digest or (store.is_cached(entry.name) and store.verify(entry.name).sha256 == digest):
            return entry.name
    return None


def _check_same_inputs(path: Path, reference: Path, name: str) -> None:
    def signature(p: Path) -> list[tuple[int, ...]]:
        graph = onnx.load(str(p), load_external_data=False).graph
        init = {i.name for i in graph.initializer}
        return [tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in graph.input if i.name not in init]

    if signature(path) != signature(reference):
        raise FacefuseError(ErrorCode.MODEL_MISMATCH, f"{path.name} does not take the inputs of '{name}'",
                            "pass the --contract of the model this file was made from",
                            {"file_inputs": signature(path), "contract_inputs": signature(reference)})


def split_photos(request: OptimizeRequest) -> tuple[list[Path], list[Path]]:
    """(calibration photos, held-out photos), disjoint."""
    calibration = photo_paths(request.calibration, request.max_images) if request.calibration else []
    if request.holdout:
        held = set(p.resolve() for p in calibration)
        holdout = [p for p in photo_paths(request.holdout, request.max_images) if p.resolve() not in held]
        return calibration, holdout
    holdout = calibration[HOLDOUT_EVERY - 1::HOLDOUT_EVERY]
    return [p for p in calibration if p not in holdout], holdout


def optimize_model(request: OptimizeRequest, store: ModelStore, runtime_config: RuntimeConfig | None = None,
                   analysis: AnalysisConfig | None = None) -> QualityReport:
    if Precision.parse(request.precision) not in Precision.variants():
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"cannot make a {request.precision} copy",
                            f"choose one of: {', '.join(p.value for p in Precision.variants())}",
                            {"precision": str(request.precision)})
    if request.precision == "int8" and request.calibration is None:
        raise FacefuseError(ErrorCode.INVALID_OPTION, "INT8 needs calibration photos",
                            "pass --calibration DIR with photos of faces (20 or more)", {})
    if request.calibration is None and request.holdout is None:
        raise FacefuseError(ErrorCode.INVALID_OPTION, "the quality report needs held-out photos",
                            "pass --holdout DIR (or --calibration DIR, a fifth of which is held out)", {})
    name, source = resolve_model(request, store)
    check_excluded(onnx.load(str(source), load_external_data=False), request.int8.exclude)
    # A private runtime: its session cache must not keep a file this call may overwrite.
    runtime = Runtime(runtime_config or RuntimeConfig())
    kind = model_kind(name, store, runtime, (analysis or AnalysisConfig()).detect_threshold,
                      None if request.model in store.registry else source)
    # the reference faces always come from the FP32 pipeline, whatever precision the caller runs at
    analyzer = FaceAnalyzer(store, runtime, (analysis or AnalysisConfig()).replaced(precision="fp32"))
    calibration_paths, holdout_paths = split_photos(request)
    if not holdout_paths:
        raise FacefuseError(ErrorCode.INVALID_OPTION, "no held-out photos for the quality report",
                            f"pass --holdout DIR, or at least {HOLDOUT_EVERY} photos in --calibration", {})
    holdout = load_samples(holdout_paths, analyzer)
    if not holdout:
        raise FacefuseError(ErrorCode.NO_FACE, "no face was found in any held-out photo",
                            "use photos with clearly visible faces", {"photos": len(holdout_paths)})
    output = request.output or Path(f"{name}.{request.precision}.onnx")
    if output.resolve() == source.resolve():
        raise FacefuseError(ErrorCode.INVALID_OPTION, "--output would overwrite the model being optimised",
                            "write the variant to another file", {"output": str(output)})
    output.parent.mkdir(parents=True, exist_ok=True)
    calibration_count = 0
    if request.precision == "int8":
        samples = load_samples(calibration_paths, analyzer)
        calibration_count = len(samples)
        quantize_int8(source, output, record_feeds(runtime.session(source), kind, samples), request.int8)
    else:
        convert_fp16(source, output, request.int8.exclude)
    report = judge(name, kind, source, output, request, holdout, runtime, calibration_count)
    if request.install and (report.passed or request.force):
        report.installed = str(install_variant(store, name, request.precision, output, report))
    return report


def judge(name: str, kind: ModelKind, source: Path, output: Path, request: OptimizeRequest,
          holdout: list[Sample], runtime: Runtime, calibration_count: int) -> QualityReport:
    """The report: the model's driver on every held-out photo, FP32 against the variant, plus size and latency."""
    reference_session, candidate_session = runtime.session(source), runtime.session(output)
    reference = [kind.driver(reference_session, s) for s in holdout]
    candidate = [kind.driver(candidate_session, s) for s in holdout]
    metrics, checks = compare(kind.task, reference, candidate, kind.detection_threshold)
    feed = record_feeds(reference_session, kind, holdout[:1])[0]
    before, after = paired_latency_ms([reference_session, candidate_session], feed, request.latency_runs)
    latency = {"fp32": before, request.precision: after}
    settings = {"method": request.int8.method, "per_channel": request.int8.per_channel,
                "exclude": list(request.int8.exclude)} if request.precision == "int8" else \
        {"exclude": list(request.int8.exclude), "keep_io_types": True}
    sizes = {"fp32": source.stat().st_size, request.precision: output.stat().st_size}
    return QualityReport(name, request.precision, str(source), str(output), settings, calibration_count,
                         len(holdout), metrics, checks, sizes, latency)


def install_variant(store: ModelStore, name: str, precision: str, output: Path, report: QualityReport) -> Path:
    """Put a variant into the cache as ``NAME@PRECISION`` (the store's own atomic install, with its hash), with its
    report beside it.

    Only variants that passed their report are installed (unless forced), so ``--precision`` never selects one
    that failed; the recorded SHA-256 makes the store verify the file like any downloaded model from then on.
    """
    return store.install(variant_name(name, precision), output,
                         {".report.json": json.dumps(report.to_dict(), indent=2)})
