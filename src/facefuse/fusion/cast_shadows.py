"""Skin shading that follows a cast shadow's edge: an edge-aware (bilateral) normalised convolution of the skin.

Why: the relight stage (:func:`.relight.relight`) replaces the source's shading, a Gaussian average of its skin at
6 % of the face width, by the target's. A cast shadow's edge is sharper than that: the Gaussian spreads it, and
``face − shade(face)`` keeps a dark band on the shadow's side of the edge and a light one on the other — the
source's own shadow carried into a target lit differently (issue 17's smears: a dark diagonal band from the nose
wing down the far cheek of a side-lit source).

How: a bilateral grid in the manner of Durand & Dorsey (2002): the skin is split into lightness layers (Gaussian
weights ``RANGE_LEVELS`` apart in L*), each layer's skin averaged as :func:`.relight.skin_shading` does, and each pixel
reads the layers at its own lightness. Skin in a shadow is then averaged with skin in the same shadow, skin in the
light with skin in the light; pores and grain (a few levels) stay in the residual, as before.
"""

from __future__ import annotations

import cv2
import numpy as np

RANGE_LEVELS = 14.0  # OpenCV 8-bit L* levels: lightness steps larger than this are light, not texture
LAYER_STEP = 10.0  # L* levels between the grid's layers (a layer's Gaussian weight has σ = RANGE_LEVELS)
SUPPORT = 0.05  # of a full neighbourhood's skin weight: the least a layer needs near a pixel to be trusted
# of the face's width, from its outline inward: the edge-aware estimate is used in full out to RIM_OUTER and fades
# out by RIM_INNER. The inner face's shading is its 3-D shape (nose, eye sockets, cheekbones) and identity: followed
# there too it cost 26.8 points of MobileFaceNet top-1 on face-api-js cross pairs (78.6 → 51.8 %)
RIM_OUTER, RIM_INNER = 0.08, 0.15
DOWNSCALE = 4  # light is smooth and an edge 4 px wide is far finer than the 6 % scale: layers at 1/4 resolution


def edge_aware_shading(lab: np.ndarray, weight: np.ndarray, sigma: float, plain: np.ndarray) -> np.ndarray:
    """Smooth Lab shading (float32, full size) of the skin in ``weight`` (0–1) at ``sigma`` px, each skin pixel
    averaged only with skin of a similar lightness; ``plain`` (:func:`.relight.skin_shading` of the same skin) is
    kept off the skin (features, hair) and where a pixel's own layer has too little skin nearby."""
    height, width = weight.shape
    small = (max(1, width // DOWNSCALE), max(1, height // DOWNSCALE))
    lab_s = cv2.resize(lab, small, interpolation=cv2.INTER_AREA)
    weight_s = cv2.resize(weight.astype(np.float32), small, interpolation=cv2.INTER_AREA)
    skin = weight_s > 0.5
    if not skin.any():
        return plain
    s = max(sigma / DOWNSCALE, 0.5)
    lightness = lab_s[..., 0]
    low, high = np.percentile(lightness[skin], [1, 99])
    everywhere = np.maximum(cv2.GaussianBlur(weight_s, (0, 0), s), 1e-4)
    out = np.zeros_like(lab_s)
    total = np.zeros(small[::-1], np.float32)
    for level in np.arange(low, high + LAYER_STEP, LAYER_STEP, dtype=np.float32):
        layer = weight_s * np.exp(-0.5 * ((lightness - level) / RANGE_LEVELS) ** 2)
        den = cv2.GaussianBlur(layer, (0, 0), s)
        estimate = cv2.GaussianBlur(lab_s * layer[..., None], (0, 0), s) / np.maximum(den, 1e-6)[..., None]
        # a pixel reads the layers around its own lightness (a hat one step wide), each as far as skin supports it
        hat = np.clip(1.0 - np.abs(lightness - level) / LAYER_STEP, 0.0, 1.0) * np.clip(den / everywhere / SUPPORT,
                                                                                         0.0, 1.0)
        out += estimate * hat[..., None]
        total += hat
    layered = out / np.maximum(total, 1e-4)[..., None]
    trusted = np.clip(total, 0.0, 1.0) * np.clip(weight_s, 0.0, 1.0)
    shift = (layered - cv2.resize(plain, small, interpolation=cv2.INTER_AREA)) * trusted[..., None]
    hull = np.zeros(skin.shape, np.uint8)
    cv2.fillConvexPoly(hull, cv2.convexHull(cv2.findNonZero(skin.astype(np.uint8))), 1)
    inside = cv2.distanceTransform(hull, cv2.DIST_L2, 3)
    face_w = float(np.ptp(np.flatnonzero(hull.max(0)))) + 1.0
    rim = np.clip((RIM_INNER * face_w - inside) / ((RIM_INNER - RIM_OUTER) * face_w), 0.0, 1.0)
    shift *= rim[..., None]
    shift = cv2.resize(shift, (width, height), interpolation=cv2.INTER_LINEAR)
    return plain + shift
