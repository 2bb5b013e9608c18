"""The engine interface every face generator implements (the mesh engine, the ONNX neural swappers), and the
fusion options they are given.

An engine only makes the new face in an aligned crop; alignment, segmentation, relighting, blending, paste-back and
labelling are shared stages (:mod:`facefuse.stages`) so every engine gets the same natural edges and the same label.
Engines are split into ``prepare_source`` (once per source photo) and ``render`` (once per target face), so a
photo with several target faces pays for the source once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

import cv2
import numpy as np
from pydantic import Field

from ..analysis.segmentation import FaceParsing
from ..analysis.types import Face
from .restorer import RestoreMode
from ..schema import Options, Scope, option

if TYPE_CHECKING:
    from .shading import ShapeNormals


FaceIndex = Annotated[int, Field(ge=0, le=999)]


class FusionOptions(Options):
    """The knobs of one fusion: the one definition the CLI flags, the HTTP fields, the OpenAPI schema and the web
    page's controls are derived from (see :mod:`facefuse.schema`; the README says how to add one).

    Frozen and validated when built: ``FusionOptions(feature_degree=101)`` raises ``INVALID_OPTION``, and every
    instance that exists is valid, so the pipeline never checks again.
    """

    profile_degree: float = option(
        70.0, "Face shape from the source",
        "0–100: how far the face contour moves from the target's shape toward the source's",
        ge=0, le=100, allow_inf_nan=False)
    feature_degree: float = option(
        90.0, "Features and skin from the source",
        "0–100: how much of the source's features (eyes, brows, nose, lips) and skin replaces the target's",
        ge=0, le=100, allow_inf_nan=False)
    target_face: Literal["largest", "all"] | FaceIndex = option(
        "largest", "Face in the target", "largest, all, or a face index counted from 0, left to right",
        control="face")
    source_face: Literal["largest"] | FaceIndex = option(
        "largest", "Face in the source", "largest, or a face index counted from 0, left to right", control="face")
    engine: str = option(
        "mesh", "Engine", "fusion engine: mesh, or a neural swapper (see `facefuse models list`); the service "
        "accepts only the engines its operator loaded (default: the first of them)",
        min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_.-]+$")
    visible_label: bool = option(
        True, 'Show "AI-generated" on the image',
        "draw the visible 'AI-generated' mark (the metadata label is always written)")
    blend: Literal["multiband", "poisson"] = option(
        "multiband", "Blend", "how the new face is blended in: multiband (Laplacian pyramid) or poisson (gradient "
        "domain cloning; slower)")
    sharpen: float = option(
        0.35, "Sharpen", "0–1: halo-free unsharp mask of the new face's lightness (restores detail lost to warping; "
        "the colour of an edge is left alone)",
        ge=0, le=1, allow_inf_nan=False)
    restore: RestoreMode = option(
        "auto", "Restore poor faces",
        "auto: restore a source or target face the quality gate finds blurry, small (< 96 px) or heavily "
        "compressed, before fusion; on: every chosen face; off: never. Uses our UTKFace-trained restorer "
        "(non-commercial research licence; skipped with a warning when the deployment disallows such models)")
    enhance: Literal["off", "auto"] = option(
        "off", "Enhance soft fused faces",
        "auto: after blending, when the source face was 1.5× or more smaller than the target face, our "
        "UTKFace-trained restorer adds fine detail to the fused face's bare skin (and grain matched to the photo) "
        "until it is as sharp as the photo's; off (default: it no longer lowers identity, see BENCHMARKS.md, but "
        "the whole face gets no sharper, and it costs most of a fusion again: the post row of "
        "benchmarks/fusion_speed.py)")
    crop_size: int = option(
        512, "Crop size", "128–1024 px: the largest side of the aligned face crop the mesh engine renders (a "
        "smaller face gets a crop at the photo's own resolution); work grows with its square, so the service takes "
        "it from its operator, not from requests",
        scope=Scope.OPERATOR, ge=128, le=1024)
    light: Literal["shading", "full", "shape"] = option(
        "shading", "Light", "shading: the target's own shading moved onto the new face, the source's deepest skin "
        "shading (eye sockets, folds) kept as part of its likeness; full: the target's shading on every skin pixel "
        "(fewest blotches and smears, a less recognisable face); shape: the target's light fitted on the 3-D face "
        "and applied to the source's shape (keeps the source's nose and cheekbone shading, fewer streaks on side-lit "
        "photos, more blotches; mesh engine)")
    makeup: Literal["target", "source"] = option(
        "target", "Make-up", "target: the source's lipstick and eye shadow toned to the target's own lips and eyelids, "
        "and a coloured light's cast on its brows to the target's brows (make-up and light are colour, not identity); source: "
        "the source's make-up and brow colour are kept (a make-up try-on)")
    eyes: Literal["auto", "target", "source"] = option(
        "auto", "Eyes", "auto: the source's eyes (iris and sclera: a large part of the likeness) where the target's "
        "eyes are open, their irises moved to the target's gaze where the two look different ways (not on eyes "
        "under 12 px, nor under a coloured light: then the target's); target: always the target's eyes; source: "
        "always the source's as they are (its gaze too)")
    segmentation: Literal["auto", "whole", "off"] = option(
        "auto", "Keep what covers the face", "auto: the trained segmenter keeps the target's glasses, fringe and "
        "hands on top and the source's hair out, when the licence setting allows it (else the classic masks, with "
        "a warning); whole: as auto, and the target's glasses frames, microphones and hands the segmenter is sure "
        "of are kept whole to their faint edge — sharper frames, less of the source's likeness next to them "
        "(measured figures in BENCHMARKS.md); off: classic masks only")

    @property
    def changes_faces(self) -> bool:
        """False when both degrees are 0: the photo comes back untouched (labelled), no face is changed."""
        return self.profile_degree > 0 or self.feature_degree > 0

    @property
    def restores_targets(self) -> bool:
        """Whether the restore stage may act on a target face: the streams' trackers then accept faces the gate
        finds blurry or small, as the photo path's gate does."""
        return self.restore != "off" and self.changes_faces


@dataclass
class SourceFace:
    """What an engine keeps of the source photo: the face and any engine-specific payload (crop, embedding)."""

    face: Face
    payload: dict[str, Any] = field(default_factory=dict)
    # the source face parsed in its own photo (the segment stage's source half; None without the segmenter), for an
    # engine that asks which of its points the photo really shows. A call, made only when needed: a photo fusion
    # parses the source on a thread of its own, and the call waits for it (PreparedSource.source_parsing)
    parsing: Callable[[], FaceParsing | None] | None = None


@dataclass(frozen=True, eq=False)
class SourceMap:
    """Where each pixel of a new face comes from in the source photo: the engine's remap ``table`` (crop pixel →
    the coordinates of the frame ``to_crop`` maps the photo into), and, where part of the face was taken from its
    mirror side, that side's table and its weight per crop pixel.

    Why: anything known about the source photo pixel by pixel can follow the face the way its texture did — the
    segment stage parses the source once in its own photo, a natural face, instead of parsing every rendered face
    (a stretched one, with the photo's border reflected into the crop's corners; issue 17: a fringe over the
    temple that the render's parsing missed showed as a grey smear)."""

    table: tuple[np.ndarray, np.ndarray]
    to_crop: np.ndarray  # (2, 3) source photo → the table's frame
    mirror_table: tuple[np.ndarray, np.ndarray] | None = None
    mirror_weight: np.ndarray | None = None

    def warp(self, planes: np.ndarray, photo_to_planes: np.ndarray, size: int) -> np.ndarray:
        """``planes`` (channels × h × w, float32, in the frame ``photo_to_planes`` maps the source photo into)
        carried onto the crop at ``size`` × ``size`` (the crop scaled, e.g. to the segmenter's 128 px), bilinear;
        0 where the source frame has no pixel."""
        from_table = np.vstack([photo_to_planes, [0.0, 0.0, 1.0]]) @ np.vstack(
            [cv2.invertAffineTransform(self.to_crop), [0.0, 0.0, 1.0]])
        stack = np.ascontiguousarray(planes.transpose(1, 2, 0))

        def carried(table: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
            map_x, map_y = (cv2.resize(m, (size, size), interpolation=cv2.INTER_AREA) for m in table)
            x = from_table[0, 0] * map_x + from_table[0, 1] * map_y + from_table[0, 2]
            y = from_table[1, 0] * map_x + from_table[1, 1] * map_y + from_table[1, 2]
            out = cv2.remap(stack, x.astype(np.float32), y.astype(np.float32), interpolation=cv2.INTER_LINEAR,
                            borderMode=cv2.BORDER_CONSTANT, borderValue=0)
            return out.reshape(size, size, -1)

        out = carried(self.table)
        if self.mirror_table is not None and self.mirror_weight is not None:
            weight = cv2.resize(self.mirror_weight, (size, size), interpolation=cv2.INTER_AREA)[..., None]
            out = out + np.clip(weight, 0.0, 1.0) * (carried(self.mirror_table) - out)
        return np.ascontiguousarray(out.transpose(2, 0, 1), dtype=np.float32)


@dataclass
class RenderedFace:
    """A generated face in an aligned square crop of the target.

    ``matrix`` maps target-image pixels into the crop; ``target_crop`` is the target in that crop (an engine that
    reshapes the face returns it already reshaped); ``mask`` (float32, 0–1) marks where the new face replaces the
    target; ``keep_target`` (float32, 0–1) marks regions that must stay the target's (eyes, mouth interior);
    ``region`` marks every crop pixel that may differ from the original target (default: the mask), and is what
    gets pasted back, so pixels outside it stay byte-identical. ``skin`` (float32, 0–1) marks the bare skin of the
    new geometry (no brows, eyes, lips): where the relight stage reads each photo's shading; engines that know no
    geometry leave it ``None`` and the relight stage uses the eroded mask. ``normals`` (the new face's, the
    source's and the target's 3-D normals per pixel) lets the relight stage move the light by the faces' shape
    (:mod:`facefuse.fusion.shading`); without it the target's shading is transferred (:mod:`.relight`).
    """

    crop: np.ndarray
    target_crop: np.ndarray
    mask: np.ndarray
    matrix: np.ndarray
    keep_target: np.ndarray | None = None
    region: np.ndarray | None = None
    skin: np.ndarray | None = None
    normals: ShapeNormals | None = None
    points: np.ndarray | None = None  # the new face's 468 points in the crop (x, y), where the engine knows them
    source_map: SourceMap | None = None  # where the new face's pixels come from in the source photo, if known


# one frame's turn in what a track's frames share (facefuse.video.parsing.ParsingTurn): called with the work that
# computes the value, it runs it (the first frame of each group) or gives the group's first frame's result
CarryTurn = Callable[[Callable[[], Any]], Any]


@dataclass(frozen=True, eq=False)
class StreamCarry:
    """What the render of a video or live frame takes from an earlier frame of the same tracked face: the face's
    triangles (its topology), its make-up toning, its mirror fill and whose eyes it shows, measured on the first
    frame of each group of frames and reused by the others (issue 19: 1.3 and 4.9 ms of a live frame's 26 ms render; the mirror fill, paid
    only where source and target are turned more than 30° apart, ~8 ms). A photo has none: all is measured."""

    topology: CarryTurn
    toning_turn: CarryTurn
    mirror: CarryTurn
    # whose eyes (``eyes="auto"``): an :class:`~facefuse.fusion.eyes.EyesChoice` made on a group's first frame,
    # given the group before's (a stream's is chained, so the gaze check has a hysteresis)
    eyes: CarryTurn

    def toning(self, size: int, measure: Callable[[], tuple[np.ndarray, Any]],
               apply: Callable[[Any], np.ndarray]) -> np.ndarray:
        """The toned face: measured here (``measure``: the toned face and its tonings) on a group's first frame, or
        the first frame's tonings applied (``apply``) when its crop had this frame's ``size``."""
        measured: list[np.ndarray] = []

        def lead() -> tuple[int, Any]:
            face, tonings = measure()
            measured.append(face)
            return size, tonings

        carried_size, tonings = self.toning_turn(lead)
        if measured:
            return measured[0]
        return apply(tonings) if carried_size == size else measure()[0]


class FusionEngine(Protocol):
    """A face generator. The pipeline's stages call it in this order: ``prepare_source`` once per source (the
    render stage's source half), ``crop_matrix`` (the align stage warps the target crop with it, once, for the
    engine and the segment stage alike), then ``render`` on that crop for each target face."""

    name: str
    # True when ``render`` fills ``RenderedFace.source_map``: the segment stage then parses the source once, in its
    # own photo, and carries that onto each new face instead of parsing the rendered one
    maps_source: bool

    def prepare_source(self, image: np.ndarray, face: Face) -> SourceFace: ...

    def crop_matrix(self, face: Face, options: FusionOptions) -> tuple[np.ndarray, int]:
        """(image → crop matrix, crop side) of the aligned crop this engine renders ``face`` in."""

    def render(self, source: SourceFace, target_crop: np.ndarray, matrix: np.ndarray, target_face: Face,
               options: FusionOptions, photo: np.ndarray | None = None,
               carry: StreamCarry | None = None) -> RenderedFace:
        """The new face in the aligned crop ``target_crop`` (the target photo warped by ``matrix``); ``photo`` is
        that photo itself, for an engine that reshapes the target and can resample it once, straight from its own
        pixels, rather than the crop a second time; ``carry``: what a stream's track carries between its frames
        (an engine may ignore it)."""
