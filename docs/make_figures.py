"""Makes the README's before/after picture: source, target and the fused result side by side.

Why these photos: the official portraits of Joe Biden and Barack Obama are works of the US federal government,
so in the public domain, and may be shown (ageitgey/face_recognition ships them as ``examples/biden.jpg`` and
``examples/obama.jpg``; here they are read from the test data, never committed). The picture is fused with the
defaults and shows the visible "AI-generated" mark; the JPEG carries the metadata label too.

    python docs/make_figures.py     # writes docs/img/before_after.jpg
"""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np

import facefuse
from facefuse.imageio import add_visible_mark, decode_image, encode_image

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent / "tests"))
from testdata import prepared_root

HEIGHT = 300  # px of each panel: small enough for a README, large enough to judge the face
MARGIN = 0.8  # of the face box's side on each side of it: head and shoulders, so the face fills the panel
CAPTIONS = ("source: whose face", "target: pose, light, scene", "result (defaults)")


def panel(pixels: np.ndarray, caption: str) -> np.ndarray:
    """The photo scaled to HEIGHT with its caption on a white band below."""
    width = round(pixels.shape[1] * HEIGHT / pixels.shape[0])
    scaled = cv2.resize(pixels, (width, HEIGHT), interpolation=cv2.INTER_AREA)
    band = np.full((34, width, 3), 255, np.uint8)
    cv2.putText(band, caption, (6, 23), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    return np.vstack([scaled, band])


def around_face(pixels: np.ndarray, box: list[float]) -> np.ndarray:
    """The square around a face box (x, y, w, h) widened by MARGIN, clipped to the photo."""
    x, y, w, h = box
    side = max(w, h) * (1 + 2 * MARGIN)
    cx, cy = x + w / 2, y + h / 2
    top, left = max(0, round(cy - side / 2)), max(0, round(cx - side / 2))
    return pixels[top: round(cy + side / 2), left: round(cx + side / 2)]


def before_after(source: Path, target: Path) -> np.ndarray:
    """Source, target and result in one row, each cropped around its face (target and result alike)."""
    fuser = facefuse.Fuser()
    source_box = fuser.analyze(source).faces[0].box
    # the mark goes on the crop: on the whole photo it would sit in a corner the crop cuts away
    result = fuser.fuse(source, target, facefuse.FusionOptions(visible_label=False))
    target_box = result.faces[0]["box"]
    photos = (around_face(decode_image(source).pixels, source_box), around_face(decode_image(target).pixels,
              target_box), add_visible_mark(around_face(result.image, target_box)))
    panels = [panel(p, c) for p, c in zip(photos, CAPTIONS)]
    gap = np.full((HEIGHT + 34, 8, 3), 255, np.uint8)
    return np.hstack([panels[0], gap, panels[1], gap, panels[2]])


def main() -> None:
    photos = prepared_root() / "faces" / "face_recognition"
    out = DOCS / "img" / "before_after.jpg"
    out.parent.mkdir(exist_ok=True)
    out.write_bytes(encode_image(before_after(photos / "biden.jpg", photos / "obama.jpg"), "JPEG", 85))
    print(f"wrote {out.relative_to(DOCS.parent)}")


if __name__ == "__main__":
    main()
