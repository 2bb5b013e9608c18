"""Run an image model on overlapping tiles and stitch the outputs: feathering or gradient-domain (Poisson) blending.

Why tiles: memory and time stay bounded however large the photo, and the model sees inputs near its training size.
Why two ways to stitch:
- *feather*: each output is weighted by linear ramps over the overlap. Cheap, but where two tiles disagree (a model
  whose output depends on context does) the disagreement becomes a soft band the width of the overlap.
- *poisson*: every pixel's gradient is taken from one tile — the one whose centre owns it (cuts in the middle of the
  overlaps, where both tiles have context on both sides) — and the image whose gradients best match that field,
  anchored to the feathered result at low frequencies, is solved in closed form (screened Poisson equation with
  Neumann borders, diagonal in the DCT-II basis, as in Bhat et al., "GradientShop", 2010). Tile disagreements become
  a smooth correction spread over ~1/√λ pixels instead of a band; detail is the owning tile's own, never averaged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
from scipy.fft import dctn, idctn

Stitch = Literal["feather", "poisson"]
STITCHES: tuple[Stitch, ...] = ("feather", "poisson")


def tile_starts(length: int, tile: int, overlap: int) -> list[int]:
    """Start offsets of tiles of ``tile`` pixels covering ``length``, consecutive tiles overlapping ≥ ``overlap``."""
    if length <= tile:
        return [0]
    count = int(np.ceil((length - overlap) / (tile - overlap)))
    return [int(round(i * (length - tile) / (count - 1))) for i in range(count)]


def fitted_tile(length: int, tile: int, overlap: int, multiple: int = 8) -> int:
    """The tile side that cuts ``length`` into as many tiles as ``tile`` would, each as small as covering it allows
    (a multiple of ``multiple``, at most ``tile``; ``length`` itself when one tile holds it).

    Why: a region a little larger than one tile was cut into two whole tiles that overlapped by most of their side —
    a 570 px face region in 512 px tiles ran the model on 3× its pixels, slower than 256 px tiles (issue 19,
    ``benchmarks/enhance_speed.py``); two 304 px tiles cover it with the same overlap."""
    if length <= tile:
        return length
    count = int(np.ceil((length - overlap) / (tile - overlap)))
    return min(tile, int(np.ceil((length + (count - 1) * overlap) / count / multiple)) * multiple)


def ramp(length: int, start: int, tile: int, total: int, overlap: int) -> np.ndarray:
    """1-D feather weights of one tile: linear ramps over the overlap, except at the image's own edges."""
    w = np.ones(tile, np.float32)
    if overlap <= 0:
        return w[:length]
    rise = (np.arange(overlap, dtype=np.float32) + 0.5) / overlap
    if start > 0:
        w[:overlap] = rise
    if start + tile < total:
        w[-overlap:] = rise[::-1]
    return w[:length]


def owner_cuts(starts: list[int], tile: int, total: int) -> list[int]:
    """Where ownership passes from one tile to the next along an axis: the middle of each overlap."""
    return [(starts[i + 1] + min(starts[i] + tile, total)) // 2 for i in range(len(starts) - 1)]


def _owned(starts: list[int], tile: int, total: int) -> list[tuple[int, int]]:
    """(first, end) of the pixels each tile owns along an axis."""
    edges = [0, *owner_cuts(starts, tile, total), total]
    return list(zip(edges[:-1], edges[1:]))


def screened_poisson(gx: np.ndarray, gy: np.ndarray, anchor: np.ndarray, weight: float) -> np.ndarray:
    """argmin_u |∇u − (gx, gy)|² + ``weight``·|u − anchor|² with Neumann borders, per channel, via DCT-II.

    ``gx[y, x]`` is the wanted u[y, x+1] − u[y, x] (last column 0), ``gy`` likewise down the rows."""
    div = gx.copy()
    div[:, 1:] -= gx[:, :-1]
    div += gy
    div[1:] -= gy[:-1]
    h, w = anchor.shape[:2]
    eig = (2 - 2 * np.cos(np.pi * np.arange(h) / h))[:, None] + (2 - 2 * np.cos(np.pi * np.arange(w) / w))[None]
    rhs = dctn(weight * anchor - div, type=2, axes=(0, 1), norm="ortho")
    return idctn(rhs / (weight + eig)[:, :, None], type=2, axes=(0, 1), norm="ortho").astype(np.float32)


def run_tiled(image: np.ndarray, model: Callable[[np.ndarray], np.ndarray], tile: int, overlap: int,
              stitch: Stitch = "poisson") -> np.ndarray:
    """``model`` applied to a float32 (H, W, C) image tile by tile (one call when it fits one tile)."""
    h, w = image.shape[:2]
    if h <= tile and w <= tile:
        return model(image)
    tile_y, tile_x = fitted_tile(h, tile, overlap), fitted_tile(w, tile, overlap)
    ys, xs = tile_starts(h, tile_y, overlap), tile_starts(w, tile_x, overlap)
    acc = np.zeros_like(image)
    weight = np.zeros((h, w, 1), np.float32)
    gx, gy = np.zeros_like(image), np.zeros_like(image)
    for y0, (oy0, oy1) in zip(ys, _owned(ys, tile_y, h)):
        for x0, (ox0, ox1) in zip(xs, _owned(xs, tile_x, w)):
            out = model(image[y0:y0 + tile_y, x0:x0 + tile_x])
            ph, pw = out.shape[:2]
            wgt = np.outer(ramp(ph, y0, tile_y, h, overlap), ramp(pw, x0, tile_x, w, overlap))[:, :, None]
            acc[y0:y0 + ph, x0:x0 + pw] += out * wgt
            weight[y0:y0 + ph, x0:x0 + pw] += wgt
            if stitch == "poisson":  # this tile's own gradients where it owns the pixel (the last one stays 0)
                dx = np.diff(out, axis=1)[oy0 - y0:oy1 - y0, ox0 - x0:min(ox1, w - 1) - x0]
                dy = np.diff(out, axis=0)[oy0 - y0:min(oy1, h - 1) - y0, ox0 - x0:ox1 - x0]
                gx[oy0:oy1, ox0:ox0 + dx.shape[1]] = dx
                gy[oy0:oy0 + dy.shape[0], ox0:ox1] = dy
    feathered = acc / np.maximum(weight, 1e-6)
    if stitch == "feather":
        return feathered
    return screened_poisson(gx, gy, feathered, weight=1.0 / max(overlap, 1) ** 2)


def seam_score(restored: np.ndarray, tile: int, overlap: int) -> dict[str, float]:
    """How visible tile borders are: mean |step| between neighbouring pixels across every line where a tile starts
    or ends or where ownership changes (the middle of an overlap), divided by the mean |step| everywhere else
    (≈1: the borders look like any other place in the photo)."""
    img = restored.astype(np.float32)
    h, w = img.shape[:2]

    def cuts(length: int) -> set[int]:
        side = fitted_tile(length, tile, overlap)  # as run_tiled cut it
        starts = tile_starts(length, side, overlap)
        lines = {s for x0 in starts for s in (x0, x0 + side)} | set(owner_cuts(starts, side, length))
        return lines - {0, length}

    cuts_x, cuts_y = cuts(w), cuts(h)
    dx = np.abs(np.diff(img, axis=1)).mean(axis=(0, 2))
    dy = np.abs(np.diff(img, axis=0)).mean(axis=(1, 2))
    on_x = np.array([i + 1 in cuts_x for i in range(w - 1)])
    on_y = np.array([i + 1 in cuts_y for i in range(h - 1)])
    border = np.concatenate([dx[on_x], dy[on_y]])
    inside = np.concatenate([dx[~on_x], dy[~on_y]])
    b = float(border.mean()) if border.size else 0.0
    i = float(inside.mean()) if inside.size else 0.0
    return {"border": b, "inside": i, "ratio": b / max(i, 1e-6)}
