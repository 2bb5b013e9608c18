"""Light from 3-D shape: second-order spherical-harmonics (SH) lighting on the FaceMesh normals — the relight stage
of the mesh engine with ``FusionOptions.light = "shape"``.

Why: replacing the source's shading with the target's at a few % of the face width (:func:`relight.relight`) also
replaces the source's *shape* shading — the nose's side, cheekbones, eye sockets, jaw — so the target's face shape
came back through it and cost ~13 points of identity (issue 17). Here each photo's light is estimated from its own
skin and its own 3-D normals (Lambertian skin under distant light, 9 SH coefficients on luminance, a least-squares
fit: Wen, Liu & Huang 2003; Dale et al. 2011), and the new face's normals are shaded under the target's light
and under the source's: their ratio moves the light and keeps the source's shape. What SH cannot explain in the
target (a cast shadow, a hard highlight) is carried as a residual ratio low-passed at 8 % of the face width.

Measured against the default shading transfer (:mod:`.relight`, same crop, detail and masks): on face-api-js cross
pairs identity 75.0 % against 73.2 % (MobileFaceNet) but 58.9 % both (dlib), blotch 1.40 % against 0.48 %; on
knn_examples (12 pairs, σ 15 %) 41.7 % / 83.3 % against 50.0 % / 100 %; on self-swaps 3.6 % blotch against 2.1 %:
FaceMesh's depth differs between two photos of one face, and the ratio of two SH shadings turns that into light.
It is kept as the choice for side-lit targets, where the shading transfer draws a dark streak beside the nose.

Why it does not keep the source's shape as it should (issue 17): the new face's normals are the source's shape
(drawn: they are), but FaceMesh's SH shading is smooth, so the residual — the target ÷ its SH fit, low-passed at
8 % — still holds the target's nose, cheek and eye-socket shading: this mode is close to a ratio shading transfer
at 8 %. With the residual at 20 % identity rises and the light falls apart (BENCHMARKS.md, "Identity ablation"):
the SH light on the mesh's normals alone does not reproduce the target's light.

The fit runs on a grid 1/4 as fine as the crop: light is smooth, and a 9-term fit over a few thousand pixels
takes well under a millisecond.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from ..geometry import mesh

# of the face width: what SH misses (cast shadows, hard highlights, a fringe's shadow) is carried at scales broader
# than features. Measured on face-api-js cross pairs (56): 15 % → identity 73.2 % / dlib 62.5 %, blotch 2.21 %,
# largest smear ≤ 1 % on 32 %; 8 % → 75.0 % / 58.9 %, blotch 1.40 %, 52 %; the old σ 6 % shading transfer (same
# crop and detail) 73.2 % / 58.9 %, blotch 0.48 %, 46 %
RESIDUAL_SIGMA_FRACTION = 0.08
RATIO_LIMITS = (0.4, 2.5)  # the most the shape's light or the residual may darken or brighten a pixel
SHADE_FLOOR = 0.15  # of the median shading on skin: the darkest a fitted shading may get
# Tikhonov weights on the SH terms (per pixel, ×mean basis energy): a face sees half a sphere of normals and its
# skin mask leaves out the nose and lips, so the second-order terms are weakly seen and extrapolate wildly there
RIDGE = np.array([0.0, 0.01, 0.01, 0.01, 0.1, 0.1, 0.1, 0.1, 0.1])
GAIN_SMOOTHING = 0.015  # of the face width: the gain's faceting (per-vertex normals) is smoothed at this scale
GAMMA = 2.2  # light adds up in linear intensity, not in sRGB codes
FIT_STEP = 4  # light is fitted on a grid this much coarser than the crop


@dataclass(frozen=True)
class ShapeNormals:
    """Unit normals (float32, h×w×3, 0 where no face) at the rendered crop's size, per pixel of the new geometry:
    ``new`` (the source's shape in the target's pose), ``source`` (the source photo's own surface that each pixel's
    texture came from) and ``target`` (the target photo's surface under each pixel)."""

    new: np.ndarray
    source: np.ndarray
    target: np.ndarray


def vertex_normals(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """(N, 3) unit normals of a 3-D point set over 2-D ``triangles``, area-weighted, all facing the viewer's side
    (sign from each triangle's winding in the image, so every photo shares one convention)."""
    corners = points[triangles]
    normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    normals *= np.where(normals[:, 2:3] < 0, -1.0, 1.0)  # toward the viewer, whatever the winding
    out = np.zeros_like(points, dtype=np.float64)
    for k in range(3):
        np.add.at(out, triangles[:, k], normals)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def mirrored(normals: np.ndarray, axes: np.ndarray, partners: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Vertex normals of a turned face whose hidden side takes its texture from the mirror side (weights 0–1): there
    the texture was lit as the partner's surface, reflected across the face's mid-plane (``axes``: its frame)."""
    reflected = ((normals[partners] @ axes) * np.array([-1.0, 1.0, 1.0])) @ axes.T
    blended = normals * (1.0 - weights[:, None]) + reflected * weights[:, None]
    return blended / np.maximum(np.linalg.norm(blended, axis=1, keepdims=True), 1e-9)


def normal_maps(nodes: mesh.MeshNodes, vertex: list[np.ndarray]) -> ShapeNormals:
    """Per-pixel normals from the per-vertex ``vertex`` normals (new, source, target; vertex order = the mesh's
    first points, the face's), interpolated over the face's triangles at the ``nodes`` and upsampled to the crop;
    0 outside the face mesh."""
    face_node = np.all(nodes.triangles[nodes.owner] < len(vertex[0]), axis=1)  # the ring and border have none
    inside = nodes.inside.copy()
    inside[inside] = face_node
    in_face = np.nonzero(face_node)[0]
    maps = []
    for own in vertex:
        padded = np.zeros((int(nodes.triangles.max()) + 1, 3))  # the ring's and border's vertices: never read
        padded[:len(own)] = own
        values = np.zeros((*inside.shape, 3), np.float32)
        values[inside] = nodes.at_nodes(padded, in_face)
        norm = np.linalg.norm(values, axis=2, keepdims=True)
        values = np.where(norm > 1e-6, values / np.maximum(norm, 1e-6), 0.0).astype(np.float32)
        maps.append(nodes.upsampled(values))
    return ShapeNormals(*maps)


def sh_basis(normals: np.ndarray) -> np.ndarray:
    """The 9 real second-order SH functions (constants folded into the coefficients) at unit ``normals`` (..., 3)."""
    x, y, z = normals[..., 0], normals[..., 1], normals[..., 2]
    return np.stack([np.ones_like(x), x, y, z, x * y, x * z, y * z, x * x - y * y, 3 * z * z - 1], axis=-1)


def _has_normal(normals: np.ndarray) -> np.ndarray:
    """Pixels well inside the face mesh (the upsampled maps fade to 0 across its edge)."""
    return np.einsum("...k,...k->...", normals, normals) > 0.8


def fit_light(linear: np.ndarray, normals: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """(9,) SH light: ridge least squares of the linear luminance ``linear`` (h×w) on the basis at ``normals`` over
    the pixels with ``weight`` > 0.5 (skin with a normal); the albedo is folded in (skin's is near constant)."""
    use = (weight > 0.5) & _has_normal(normals)
    basis = sh_basis(normals[use]).astype(np.float64)
    light = np.zeros(9)
    if len(basis) < 30:
        light[0] = np.median(linear[use]) if use.any() else 1.0
        return light
    gram = basis.T @ basis + len(basis) * np.diag(RIDGE)
    return np.linalg.solve(gram, basis.T @ linear[use].astype(np.float64))


def _shade(normals: np.ndarray, light: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The SH shading at ``normals``, floored at a share of its median over the skin: where a fit's tail dips to
    zero the ratio must not explode."""
    shade = (sh_basis(normals) @ light).astype(np.float32)
    use = (weight > 0.5) & _has_normal(normals)
    typical = float(np.median(shade[use])) if use.any() else float(light[0])
    return np.maximum(shade, SHADE_FLOOR * max(typical, 1e-4))


def _broad(values: np.ndarray, weight: np.ndarray, sigma: float) -> np.ndarray:
    """Normalised Gaussian average of ``values`` over ``weight``, defined everywhere."""
    w = cv2.GaussianBlur(weight.astype(np.float32), (0, 0), sigma)
    num = cv2.GaussianBlur((values * weight).astype(np.float32), (0, 0), sigma)
    return num / np.maximum(w, 1e-4)


def _luminance(rgb: np.ndarray) -> np.ndarray:
    linear = (rgb.astype(np.float32) / 255.0) ** GAMMA
    return linear @ np.array([0.2126, 0.7152, 0.0722], np.float32)


def light_ratio(face_rgb: np.ndarray, target_rgb: np.ndarray, face_skin: np.ndarray, target_skin: np.ndarray,
                normals: ShapeNormals, face_width: float) -> np.ndarray:
    """The per-pixel gain (h×w, on linear light) that takes the new face from the source's light to the target's:
    SH(new normals, target light) ÷ SH(source normals, source light), times the target's broad SH residual over the
    source's. One gain for all channels: the light's colour is the histogram match's job, and per-channel fits
    disagree in their tails (colour fringes). Inputs are uint8 RGB and skin weights at one size."""
    face, target = _luminance(face_rgb), _luminance(target_rgb)
    source_light = fit_light(face, normals.source, face_skin)
    target_light = fit_light(target, normals.target, target_skin)
    source_shade = _shade(normals.source, source_light, face_skin)
    target_shade = _shade(normals.target, target_light, target_skin)
    ratio = _shade(normals.new, target_light, face_skin) / source_shade
    sigma = max(RESIDUAL_SIGMA_FRACTION * face_width, 1.0)
    residual = _broad(target / target_shade, target_skin, sigma) / np.maximum(
        _broad(face / source_shade, face_skin, sigma), 1e-4)
    valid = _has_normal(normals.new) & _has_normal(normals.source)
    ratio = cv2.GaussianBlur(np.clip(np.where(valid, ratio, 1.0), *RATIO_LIMITS).astype(np.float32), (0, 0),
                             max(GAIN_SMOOTHING * face_width, 0.5))
    return (ratio * np.clip(residual, *RATIO_LIMITS)).astype(np.float32)


def relight_sh(face_rgb: np.ndarray, target_rgb: np.ndarray, face_skin: np.ndarray, target_skin: np.ndarray,
               normals: ShapeNormals, face_width: float) -> np.ndarray:
    """``face_rgb`` (uint8 RGB, in the target's geometry, colours already matched) lit by the target's light on its
    own shape; every input at the same (crop or sub-box) size. The light is fitted and its gain computed on a grid
    1/``FIT_STEP`` as fine and upsampled, then applied in linear light at full resolution."""
    height, width = face_rgb.shape[:2]
    grid = max(1, width // FIT_STEP), max(1, height // FIT_STEP)
    small = [cv2.resize(a, grid, interpolation=cv2.INTER_AREA)
             for a in (face_rgb, target_rgb, face_skin, target_skin, normals.new, normals.source, normals.target)]
    gain = light_ratio(*small[:4], ShapeNormals(*small[4:]), face_width / FIT_STEP)
    gain = cv2.resize(gain, (width, height), interpolation=cv2.INTER_LINEAR)
    linear = (face_rgb.astype(np.float32) / 255.0) ** GAMMA * gain[..., None]
    return np.clip(255.0 * linear ** (1.0 / GAMMA) + 0.5, 0, 255).astype(np.uint8)
