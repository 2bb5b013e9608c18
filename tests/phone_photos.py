"""Phone-sized photos made from the shared ones: no shared photo is as large as a phone's 12 MP JPEG, the usual
source of a fusion app. Used by tests/test_phone_source.py and the benchmarks (fusion_speed.py, speed_ab.py,
phone_source.py), so both measure the same files."""

from __future__ import annotations

from pathlib import Path

import cv2

PHONE_SIDE = 4000  # a 12 MP phone photo's longer side (4000×3000)


def phone_jpeg(path: Path, side: int = PHONE_SIDE, quality: int = 92) -> bytes:
    """The photo scaled up (Lanczos) so its longer side is ``side``, as JPEG ``quality``: smoother than a real
    phone photo, whose larger file also takes longer to decode."""
    image = cv2.imread(str(path))
    scale = side / max(image.shape[:2])
    ok, data = cv2.imencode(".jpg", cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_LANCZOS4),
                            [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return data.tobytes()
