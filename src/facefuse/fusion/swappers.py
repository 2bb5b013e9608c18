"""The public ONNX face swappers as fusion engines, each fed exactly as its publisher's code feeds it.

A swapper only replaces the face inside its aligned crop; paste-back goes through the shared stages
(:func:`facefuse.fusion.blend.compose`: colour matching, multi-band blend, label), with the same
expression-preserving mask as the mesh engine (the target's eyes and mouth interior are kept).

Per model (one row of :data:`facefuse.models.swappers.SWAPPERS`, the table the registry entries come from too):
the alignment template and crop size, the target's pixel normalisation, how the source identity is given
(ArcFace embedding, possibly projected or converted, or an aligned source image), and the output's range. A file is accepted for an engine only if its input/output names and shapes are that
engine's; anything else is a ``MODEL_MISMATCH`` error, never a silently wrong face.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..analysis.types import Face
from ..errors import ErrorCode, FacefuseError
from ..geometry import align
from ..geometry.regions import face_masks, kept_interior, skin_mask
from ..models import ModelStore, sha256_of
from ..models.swappers import EMBEDDING, SWAPPERS, SwapperModel
from ..runtime import Runtime
from .engine import FusionOptions, RenderedFace, SourceFace, StreamCarry
from .eyes import gaze_moved, source_eyes
from .recognizer import RECOGNIZERS, Recognizer, l2_normalise
from .templates import NORMS, aligned_crop, alignment_matrix

ARCFACE = "arcface_w600k_r50"


def _dims(shape: list[Any]) -> tuple[Any, ...]:
    """Shape without the batch axis; dynamic axes as None."""
    return tuple(d if isinstance(d, int) else None for d in shape[1:])


def signature(session: Any) -> dict[str, Any]:
    return {"inputs": {i.name: _dims(i.shape) for i in session.get_inputs()},
            "outputs": [_dims(o.shape) for o in session.get_outputs()]}


def matches(spec: SwapperModel, found: dict[str, Any]) -> bool:
    inputs, outputs = found["inputs"], found["outputs"]
    return (set(inputs) == {"target", "source"}
            and inputs["target"] == (3, spec.size, spec.size)
            and inputs["source"] == spec.source_shape()
            and bool(outputs) and outputs[0] == (3, spec.size, spec.size))


def check_signature(name: str, session: Any) -> None:
    """Route a file to ``name``'s handler only if its inputs/outputs are that handler's."""
    spec = SWAPPERS[name]
    found = signature(session)
    if not matches(spec, found):
        fits = [other for other, s in SWAPPERS.items() if matches(s, found)]
        raise FacefuseError(
            ErrorCode.MODEL_MISMATCH, f"the model file does not have the inputs/outputs of '{name}'",
            f"this file fits: {', '.join(fits)}" if fits else "this file is not one of the supported swappers",
            {"engine": name, "expected": {"target": [3, spec.size, spec.size], "source": list(spec.source_shape()),
                                          "output": [3, spec.size, spec.size]},
             "found": {"inputs": {k: list(v) for k, v in found["inputs"].items()},
                       "outputs": [list(o) for o in found["outputs"]]}, "fits": fits})


def load_emap(path: Path) -> np.ndarray:
    """inswapper's identity projection: its last initializer, 512×512 (InsightFace reads it the same way)."""
    graph = onnx.load(str(path)).graph
    emap = numpy_helper.to_array(graph.initializer[-1]) if graph.initializer else np.zeros(0)
    if emap.shape != (EMBEDDING, EMBEDDING):
        raise FacefuseError(ErrorCode.MODEL_MISMATCH, f"{path.name} has no 512×512 emap as its last initializer",
                            "use the published inswapper_128 file", {"found": list(emap.shape)})
    return emap.astype(np.float32)


class SwapperEngine:
    """One swapper model plus what makes its source input (recognizer, emap or converter)."""

    maps_source = False  # a network's output pixel has no one place in the source photo

    def __init__(self, name: str, session: Any, recognizer: Recognizer | None = None,
                 converter: Any | None = None, emap: np.ndarray | None = None) -> None:
        self.name = name
        self.spec = SWAPPERS[name]
        check_signature(name, session)
        needs = {"emap": (recognizer, emap), "arcface": (recognizer,), "converted": (recognizer, converter),
                 "converted_raw": (recognizer, converter), "image": ()}[self.spec.identity]
        if any(part is None for part in needs):
            raise FacefuseError(ErrorCode.MODEL_MISSING, f"'{name}' needs its identity models "
                                f"({self.spec.identity}: recognizer{', converter' if self.spec.converter else ''}"
                                f"{', emap' if self.spec.identity == 'emap' else ''})",
                                "build the engine with make_swapper", {"engine": name})
        self.session = session
        self.recognizer = recognizer
        self.converter = converter
        self.emap = emap
        inputs = {i.name: i for i in session.get_inputs()}
        self.dynamic_batch = not isinstance(inputs["target"].shape[0], int)
        # half-precision exports may take float16 tensors; feeds are cast to what the graph declares
        self.dtypes = {name: np.float16 if i.type == "tensor(float16)" else np.float32 for name, i in inputs.items()}

    # -- source ----------------------------------------------------------------------------------------------

    def source_input(self, image: np.ndarray, face: Face) -> np.ndarray:
        """The ``source`` tensor [1, ...] for this face, per the model's published contract."""
        spec = self.spec
        if spec.identity == "image":
            crop, _ = aligned_crop(image, face.keypoints, spec.source_template, spec.source_size)
            return NORMS[spec.source_norm].to_tensor(crop)
        raw = self.recognizer.embed(image, [face.keypoints]).astype(np.float32)  # type: ignore[union-attr]
        if spec.identity == "emap":
            return l2_normalise(l2_normalise(raw) @ self.emap)
        if spec.identity == "arcface":
            return l2_normalise(raw)
        converter = self.converter
        converted = converter.run(None, {converter.get_inputs()[0].name: raw})[0].reshape(1, -1)  # type: ignore
        return converted if spec.identity == "converted_raw" else l2_normalise(converted)

    def prepare_source(self, image: np.ndarray, face: Face) -> SourceFace:
        return SourceFace(face, {"source": self.source_input(image, face).astype(np.float32)})

    # -- target ----------------------------------------------------------------------------------------------

    def swap(self, source: np.ndarray, crops: np.ndarray) -> np.ndarray:
        """(N, S, S, 3) aligned target crops → (N, S, S, 3) swapped crops; one run when the batch is dynamic."""
        target = NORMS[self.spec.target_norm].to_tensor(crops).astype(self.dtypes["target"])
        source = source.astype(self.dtypes["source"])
        if self.dynamic_batch:
            output = self.session.run(None, {"target": target, "source": np.repeat(source, len(crops), axis=0)})[0]
        else:
            output = np.concatenate([self.session.run(None, {"target": t[None], "source": source})[0]
                                     for t in target])
        return NORMS[self.spec.output_norm].from_tensor(output.astype(np.float32))

    def crop_matrix(self, face: Face, options: FusionOptions) -> tuple[np.ndarray, int]:
        return alignment_matrix(face.keypoints, self.spec.template, self.spec.size), self.spec.size

    def render(self, source: SourceFace, target_crop: np.ndarray, matrix: np.ndarray, target_face: Face,
               options: FusionOptions, photo: np.ndarray | None = None,
               carry: StreamCarry | None = None) -> RenderedFace:
        if target_face.landmarks is None:
            raise FacefuseError(ErrorCode.NO_FACE, "the target face has no landmarks for the blend mask",
                                "analyse the target with the default pipeline", {})
        (out,) = self.swap(source.payload["source"], target_crop[None])
        points = align.apply(matrix, target_face.landmarks)[:, :2]
        mask, keep, region = face_masks(points, self.spec.size, options.feature_degree / 100.0)
        eyes = source_eyes(options, out, target_crop, points, skin_mask(points, self.spec.size), carry)
        if eyes.source:
            keep = kept_interior(points, self.spec.size, eyes=False)
            if not eyes.gazes_agree:
                out = gaze_moved(out, target_crop, points)
        return RenderedFace(crop=out, target_crop=target_crop, mask=mask, matrix=matrix, keep_target=keep,
                            region=region, points=points)


def model_file(store: ModelStore, name: str, path: Path | None, allow_unknown: bool) -> Path:
    """The registry's verified file, or a local file that is the published one (or explicitly allowed)."""
    if path is None:
        return store.ensure(name)
    if not path.is_file():
        raise FacefuseError(ErrorCode.MODEL_MISSING, f"model file {path} does not exist", "check --model-path",
                            {"path": str(path)})
    expected = store.registry.get(name).sha256
    digest = sha256_of(path)
    if digest != expected and not allow_unknown:
        known = f"the published file's SHA-256 is {expected}" if expected else "no published SHA-256 is recorded"
        raise FacefuseError(ErrorCode.MODEL_MISMATCH, f"{path.name} is not a file the registry knows for '{name}'",
                            f"{known}; pass --allow-unknown-model to use it anyway",
                            {"model": name, "sha256": digest, "expected": expected})
    return path


@dataclass(frozen=True)
class SwapperFiles:
    """Local files overriding the registry's (``--model-path``); unknown hashes need ``allow_unknown``."""

    model: Path | None = None
    recognizer: Path | None = None
    converter: Path | None = None
    allow_unknown: bool = False


def make_swapper(name: str, store: ModelStore, runtime: Runtime, files: SwapperFiles | None = None) -> SwapperEngine:
    """``name`` is a row of the swapper table (the engine table checked it: :func:`engine_table.make_engine`)."""
    files = files or SwapperFiles()
    spec = SWAPPERS[name]
    path = model_file(store, name, files.model, files.allow_unknown)
    session = runtime.session(path)
    check_signature(name, session)  # before fetching the recognizer: a wrong file is the error to report
    if spec.identity == "image":
        return SwapperEngine(name, session)
    recognizer = Recognizer(runtime.session(model_file(store, ARCFACE, files.recognizer, files.allow_unknown)),
                            RECOGNIZERS[ARCFACE])
    converter = (runtime.session(model_file(store, spec.converter, files.converter, files.allow_unknown))
                 if spec.converter else None)
    emap = load_emap(path) if spec.identity == "emap" else None
    return SwapperEngine(name, session, recognizer, converter, emap)
