"""Our trained face restorer (a pruned, distilled U-Net; ``models/weights/restorer.onnx``) and how it is applied to
a face: what the restore stage (:mod:`facefuse.stages.restore`, on faces the gate finds blurry, small or heavily
compressed) and the post stage (:mod:`facefuse.fusion.enhance`) run.

How:
- *Source faces* are cut out with a margin, scaled up so the face is about as large as in training (~100 px;
  never down), restored, and handed to the engine as a new, sharper source photo (the face's coordinates move with
  it), so a 50 px face gives the engine real detail rather than an upsampled blur.
- *Target faces* are restored in place at their own resolution and feathered back, so the photo keeps its size.
- Regions larger than ``tile`` pixels are cut into overlapping tiles, stitched in the gradient domain (Poisson) or
  by feathering (:mod:`facefuse.tiling`; ``seam_score`` there measures both): bounded memory, no visible seams.
- ``restore=auto`` decides per face from :func:`needs_restore`, which reads the sharpness the gate measured
  (the record's analysis) and adds only what the gate does not measure (JPEG blockiness). A restored face comes
  back unmeasured: the gate's final verdict measures it, with the one measurement every face gets.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import cv2
import numpy as np

from ..analysis.types import Face
from ..schema import Options, Scope, option
from ..tiling import STITCHES, Stitch, run_tiled

RESTORER = "restorer"
RestoreMode = Literal["auto", "on", "off"]
MULTIPLE = 8  # the U-Net's 3 poolings need sides divisible by 8


class RestoreConfig(Options):
    """When ``restore=auto`` restores, and how the model is applied: flags of every command that fuses
    (``--restore-tile``…) and ``facefuse serve`` settings (``FACEFUSE_RESTORE_TILE``…), derived from these fields."""

    shell_prefix = "restore_"

    blurry_below: float = option(60.0, "Blurry below", "auto restores a face whose sharpness (the gate's Laplacian "
                                 "variance at 112 px) is below this; the gate refuses below min_sharpness",
                                 scope=Scope.OPERATOR, ge=0)
    small_below_px: float = option(96.0, "Small below", "auto restores a face whose box side is below this (px)",
                                   scope=Scope.OPERATOR, ge=0)
    blocky_above: float = option(1.35, "Blocky above", "auto restores a face whose JPEG 8×8 block-edge ratio is "
                                 "above this (1.0: no block structure)", scope=Scope.OPERATOR, ge=0)
    compressed_below_px: float = option(192.0, "Compressed below", "auto counts JPEG block edges as a reason only "
                                        "on a face smaller than this (px): on a larger face the 8 px blocks are "
                                        "finer than its features and restoring it only smooths its skin",
                                        scope=Scope.OPERATOR, ge=0)
    work_face_px: float = option(100.0, "Work size", "a source face is scaled up to about this size (px, the "
                                 "training scale) before restoring", scope=Scope.OPERATOR, gt=0)
    max_upscale: float = option(4.0, "Most upscale", "the most a source face is scaled up", scope=Scope.OPERATOR,
                                ge=1)
    margin: float = option(0.35, "Margin", "context around the face box, as a fraction of its side",
                           scope=Scope.OPERATOR, ge=0, le=4)
    # 512, not 256 (issue 19): the enhancer's region round a 175 px face is ~300 px, which 256 px tiles cut into
    # four (2.9× the pixels, plus the stitch): 123 → 57 ms a fusion at 720p, outputs within 2 levels; one 500 px
    # pass peaks at the same memory as its tiles (+60 MB, ONNX Runtime's arena)
    tile: int = option(512, "Tile", "regions larger than this (px) are restored in overlapping tiles (bounded "
                       "memory)", scope=Scope.OPERATOR, ge=2 * MULTIPLE)
    overlap: int = option(32, "Tile overlap", "pixels two tiles share", scope=Scope.OPERATOR, ge=0)
    stitch: Stitch = option("poisson", "Stitch", f"how tiles are joined: {' or '.join(STITCHES)} (see "
                            "facefuse.tiling)", scope=Scope.OPERATOR)
    model: Path | None = option(None, "Restorer model", "another restorer ONNX file (your own training run, an INT8 "
                                "variant) instead of the shipped one", scope=Scope.OPERATOR)
    detail_sigma: float = option(2.0, "Keep colours below", "> 0: keep the input's colours and tones below this "
                                 "scale (px) and take only the detail from the model (0: off)", scope=Scope.OPERATOR,
                                 ge=0)


def blockiness(grey: np.ndarray) -> float:
    """Mean |step| across the 8-pixel JPEG block borders divided by the mean |step| elsewhere (≈1 for a clean
    photo, larger for heavy compression). Measured in image coordinates, where the JPEG grid lies."""
    g = grey.astype(np.float32)
    dx = np.abs(np.diff(g, axis=1))
    dy = np.abs(np.diff(g, axis=0))
    if dx.shape[1] < 16 or dy.shape[0] < 16:
        return 1.0
    on_x = (np.arange(dx.shape[1]) % 8) == 7
    on_y = (np.arange(dy.shape[0]) % 8) == 7
    border = np.concatenate([dx[:, on_x].ravel(), dy[on_y].ravel()]).mean()
    inside = np.concatenate([dx[:, ~on_x].ravel(), dy[~on_y].ravel()]).mean()
    return float(border / max(inside, 1e-3))


def face_region(image: np.ndarray, face: Face, margin: float) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1): the face box grown by ``margin`` of its side, clipped to the image."""
    x, y, w, h = face.box
    pad = margin * max(w, h)
    height, width = image.shape[:2]
    x0, y0 = max(0, int(x - pad)), max(0, int(y - pad))
    x1, y1 = min(width, int(np.ceil(x + w + pad))), min(height, int(np.ceil(y + h + pad)))
    return x0, y0, x1, y1


def needs_restore(image: np.ndarray, face: Face, config: RestoreConfig) -> list[str]:
    """Why ``auto`` would restore this face (empty: it would not)."""
    reasons = []
    if face.sharpness is not None and face.sharpness < config.blurry_below:
        reasons.append(f"blurry (sharpness {face.sharpness:.0f} < {config.blurry_below:.0f})")
    side = float(min(face.box[2], face.box[3]))
    if side < config.small_below_px:
        reasons.append(f"low resolution ({side:.0f} px < {config.small_below_px:.0f} px)")
    if side >= config.compressed_below_px:
        return reasons
    x0, y0, x1, y1 = face_region(image, face, 0.0)
    grey = cv2.cvtColor(image[y0:y1, x0:x1], cv2.COLOR_RGB2GRAY)
    # snap to the JPEG grid of the whole image
    grey = image_grid(grey, x0, y0)
    ratio = blockiness(grey)
    if ratio > config.blocky_above:
        reasons.append(f"compressed (block edges ×{ratio:.2f})")
    return reasons


def image_grid(region: np.ndarray, x0: int, y0: int) -> np.ndarray:
    """Drop the first rows/columns so the region starts on the image's 8-pixel grid."""
    return region[(-y0) % 8:, (-x0) % 8:]


def keep_colours(before: np.ndarray, after: np.ndarray, sigma: float) -> np.ndarray:
    """The restored detail on the input's own colours: low-pass(before) + high-pass(after).

    Why: the first shipped restorer was trained with GFPGAN's brightness/colour jitter and learned an average
    colour correction (a warm cast) that moved faces away from their originals; keeping the input's tones made it
    safe. The current models were trained without colour jitter, and on 120 hold-out faces this step costs the
    teacher a little (SSIM 0.865 raw vs 0.859 kept, −0.02 dB); it stays the default because colour is the blend
    stage's job and the fusion figures in BENCHMARKS.md were measured with it (``detail_sigma=0`` turns it off).
    """
    return cv2.GaussianBlur(before, (0, 0), sigma) + after - cv2.GaussianBlur(after, (0, 0), sigma)


class Restorer:
    """The restorer model on an ONNX Runtime session (from :class:`facefuse.runtime.Runtime`)."""

    def __init__(self, session: Any, config: RestoreConfig = RestoreConfig()) -> None:
        self.session = session
        self.config = config
        self._input = session.get_inputs()[0].name

    def _run(self, rgb: np.ndarray) -> np.ndarray:
        """One forward pass on a float32 (H, W, 3) image in [0, 1], padded (reflect) to the model's multiple."""
        m = MULTIPLE
        h, w = rgb.shape[:2]
        ph, pw = (-h) % m, (-w) % m
        padded = np.pad(rgb, ((0, ph), (0, pw), (0, 0)), mode="reflect") if ph or pw else rgb
        out = self.session.run(None, {self._input: np.ascontiguousarray(padded.transpose(2, 0, 1)[None])})[0]
        return out[0, :, :h, :w].transpose(1, 2, 0)

    def restore(self, rgb: np.ndarray) -> np.ndarray:
        """Restore a uint8 RGB image of any size: one pass when it fits a tile, else overlapping tiles stitched as
        ``config.stitch`` says (:mod:`facefuse.tiling`)."""
        x = rgb.astype(np.float32) / 255.0
        out = run_tiled(x, self._run, self.config.tile, self.config.overlap, self.config.stitch)
        if self.config.detail_sigma > 0:
            out = keep_colours(x, out, self.config.detail_sigma)
        return np.clip(out * 255.0 + 0.5, 0, 255).astype(np.uint8)

    def restore_source(self, image: np.ndarray, face: Face) -> tuple[np.ndarray, Face]:
        """A new source photo: the face's region, scaled up toward the training size and restored, with the face's
        coordinates (box, keypoints, landmarks) moved into it, unmeasured (the gate measures it on the crop)."""
        c = self.config
        x0, y0, x1, y1 = face_region(image, face, c.margin)
        side = float(max(face.box[2], face.box[3]))
        scale = float(np.clip(c.work_face_px / max(side, 1.0), 1.0, c.max_upscale))
        region = image[y0:y1, x0:x1]
        if scale > 1.0:
            size = (int(round(region.shape[1] * scale)), int(round(region.shape[0] * scale)))
            region = cv2.resize(region, size, interpolation=cv2.INTER_CUBIC)
        return self.restore(region), _moved_face(face, x0, y0, scale)

    def restore_in_place(self, image: np.ndarray, face: Face) -> np.ndarray:
        """The photo with this face restored at its own resolution: the model sees the region with a margin of
        context, and the result is blended in through a feathered ellipse inscribed in the face box, so nothing
        outside the face changes."""
        x0, y0, x1, y1 = face_region(image, face, self.config.margin)
        region = image[y0:y1, x0:x1]
        restored = self.restore(region).astype(np.float32)
        x, y, w, h = (float(v) for v in face.box)
        yy, xx = np.mgrid[y0:y1, x0:x1].astype(np.float32) + 0.5
        radius = np.sqrt(((xx - x - w / 2) / (w / 2)) ** 2 + ((yy - y - h / 2) / (h / 2)) ** 2)
        alpha = np.clip((1.0 - radius) / 0.25, 0.0, 1.0)[:, :, None]
        out = image.copy()
        out[y0:y1, x0:x1] = np.clip(alpha * restored + (1 - alpha) * region + 0.5, 0, 255).astype(np.uint8)
        return out


def _moved_face(face: Face, x0: int, y0: int, scale: float) -> Face:
    offset = np.array([x0, y0], np.float32)
    box = face.box.astype(np.float32).copy()
    box[:2] = (box[:2] - offset) * scale
    box[2:] = box[2:] * scale
    landmarks = None
    if face.landmarks is not None:
        landmarks = face.landmarks.astype(np.float32).copy()
        landmarks[:, :2] = (landmarks[:, :2] - offset) * scale
        landmarks[:, 2:] = landmarks[:, 2:] * scale
    return replace(face, box=box, keypoints=(face.keypoints - offset) * scale, landmarks=landmarks,
                   sharpness=None, issues=())


class LazyRestorer:
    """The restorer as the stages share it: loaded on first use (one session, from the runtime), and whether this
    deployment may use it (it is licensed for non-commercial research only)."""

    def __init__(self, store: Any, runtime: Any, config: RestoreConfig | None = None) -> None:
        self.store = store
        self.runtime = runtime
        self.config = config or RestoreConfig()
        self._restorer: Restorer | None = None

    @property
    def permitted(self) -> bool:
        return bool(self.store.permits(RESTORER))

    def model(self) -> Restorer:
        if self._restorer is None:  # a benign race: two threads may build it, the runtime caches the session
            path = self.config.model or self.store.ensure(RESTORER)
            self._restorer = Restorer(self.runtime.session(path), self.config)
        return self._restorer
