"""Decoding real photos in every supported format and mode, and rejecting every class of bad input with its code.

Inputs are made from real photos in ../shared/faces by re-encoding them with Pillow (the formats, bit depths and
modes the decoder must handle); no decoder result is compared with a number copied from a run.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from facefuse.config import ImageLimits
from facefuse.errors import ErrorCode, FacefuseError
from facefuse.imageio import decode_image


@pytest.fixture(scope="module")
def portrait(faces_dir: Path) -> Image.Image:
    return Image.open(faces_dir / "face_recognition" / "obama.jpg").convert("RGB")


def encoded(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def code_of(data, limits: ImageLimits | None = None) -> ErrorCode:
    with pytest.raises(FacefuseError) as caught:
        decode_image(data, limits)
    assert caught.value.hint, "every rejection carries a hint a person can act on"
    return caught.value.code


# -- formats ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "WEBP"])
def test_lossless_formats_decode_exactly(portrait: Image.Image, fmt: str) -> None:
    options = {"lossless": True} if fmt == "WEBP" else {}
    decoded = decode_image(encoded(portrait, fmt, **options))
    assert decoded.format == fmt
    assert decoded.pixels.dtype == np.uint8 and decoded.pixels.shape == (portrait.height, portrait.width, 3)
    np.testing.assert_array_equal(decoded.pixels, np.asarray(portrait))


@pytest.mark.parametrize("fmt", ["JPEG", "WEBP"])
def test_lossy_formats_decode_close_to_the_original(portrait: Image.Image, fmt: str) -> None:
    decoded = decode_image(encoded(portrait, fmt, quality=95))
    assert decoded.pixels.shape == (portrait.height, portrait.width, 3)
    assert np.abs(decoded.pixels.astype(int) - np.asarray(portrait).astype(int)).mean() < 3


def test_real_pgm_file(faces_dir: Path) -> None:
    path = faces_dir / "att-faces" / "s1" / "1.pgm"
    decoded = decode_image(path)
    grey = np.asarray(Image.open(path))
    assert decoded.format == "PPM"
    assert decoded.pixels.shape == grey.shape + (3,)
    for channel in range(3):
        np.testing.assert_array_equal(decoded.pixels[..., channel], grey)


def test_path_bytes_and_array_inputs_agree(faces_dir: Path) -> None:
    path = faces_dir / "face_recognition" / "biden.jpg"
    from_path = decode_image(path).pixels
    np.testing.assert_array_equal(decode_image(path.read_bytes()).pixels, from_path)
    np.testing.assert_array_equal(decode_image(str(path)).pixels, from_path)
    np.testing.assert_array_equal(decode_image(from_path).pixels, from_path)


# -- modes -----------------------------------------------------------------------------------------------------


def test_greyscale_becomes_three_equal_channels(portrait: Image.Image) -> None:
    grey = portrait.convert("L")
    pixels = decode_image(encoded(grey, "PNG")).pixels
    for channel in range(3):
        np.testing.assert_array_equal(pixels[..., channel], np.asarray(grey))


@pytest.mark.parametrize("fmt", ["JPEG", "TIFF"])
def test_cmyk_is_converted_to_rgb(portrait: Image.Image, fmt: str) -> None:
    cmyk = portrait.convert("CMYK")
    pixels = decode_image(encoded(cmyk, fmt)).pixels
    assert pixels.shape == (portrait.height, portrait.width, 3)
    # CMYK round trips lose a little (and JPEG more): the picture must still be the photo, not inverted channels
    assert np.abs(pixels.astype(int) - np.asarray(portrait).astype(int)).mean() < 8


def test_sixteen_bit_png_is_scaled_not_clipped(portrait: Image.Image) -> None:
    grey8 = np.asarray(portrait.convert("L"))
    grey16 = Image.fromarray(grey8.astype(np.uint16) * 257)  # full 16-bit range
    assert grey16.mode.startswith("I;16")
    pixels = decode_image(encoded(grey16, "PNG")).pixels
    assert np.abs(pixels[..., 0].astype(int) - grey8.astype(int)).max() <= 1


def test_alpha_is_composited_over_white(portrait: Image.Image) -> None:
    rgba = portrait.convert("RGBA")
    alpha = np.full((portrait.height, portrait.width), 255, np.uint8)
    alpha[:, : portrait.width // 2] = 0  # left half fully transparent
    rgba.putalpha(Image.fromarray(alpha))
    pixels = decode_image(encoded(rgba, "PNG")).pixels
    assert (pixels[:, : portrait.width // 2] == 255).all()
    np.testing.assert_array_equal(pixels[:, portrait.width // 2:], np.asarray(portrait)[:, portrait.width // 2:])


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
@pytest.mark.parametrize("orientation,undo", [(3, 2), (6, 1), (8, 3)])  # undo: np.rot90 turns that restore
def test_exif_orientation_is_applied(portrait: Image.Image, orientation: int, undo: int, fmt: str) -> None:
    """A camera stores the sensor's pixels plus an orientation tag; decoding must show the photo upright."""
    upright = np.asarray(portrait)
    stored = np.ascontiguousarray(np.rot90(upright, undo))  # what the camera wrote
    exif = Image.Exif()
    exif[0x0112] = orientation
    decoded = decode_image(encoded(Image.fromarray(stored), fmt, quality=95, exif=exif))
    assert decoded.exif_orientation == orientation
    assert decoded.pixels.shape == upright.shape
    assert np.abs(decoded.pixels.astype(int) - upright.astype(int)).mean() < 3


# -- rejections ------------------------------------------------------------------------------------------------


def test_empty_data_is_corrupt() -> None:
    assert code_of(b"") is ErrorCode.CORRUPT_IMAGE


def test_text_is_unsupported() -> None:
    assert code_of(b"this is a CSV file,\n1,2,3\n" * 10) is ErrorCode.UNSUPPORTED_IMAGE


def test_gif_is_unsupported(portrait: Image.Image) -> None:
    assert code_of(encoded(portrait, "GIF")) is ErrorCode.UNSUPPORTED_IMAGE


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "BMP", "TIFF"])
def test_truncated_files_are_corrupt(portrait: Image.Image, fmt: str, capfd: pytest.CaptureFixture[str]) -> None:
    data = encoded(portrait, fmt)
    assert code_of(data[: len(data) // 2]) is ErrorCode.CORRUPT_IMAGE
    assert capfd.readouterr().err == "", "native decoders must not print their own error lines"


def test_damaged_header_is_rejected(faces_dir: Path) -> None:
    data = bytearray((faces_dir / "face_recognition" / "obama.jpg").read_bytes())
    data[2:64] = b"\x00" * 62  # keep the JPEG signature, wipe the segments after it
    assert code_of(bytes(data)) in {ErrorCode.CORRUPT_IMAGE, ErrorCode.UNSUPPORTED_IMAGE}


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    assert code_of(tmp_path / "nope.jpg") is ErrorCode.BAD_REQUEST


def test_byte_limit_is_checked_before_reading(tmp_path: Path) -> None:
    """A 21 MB sparse file: rejected from its size alone (reading it would take 21 MB of memory)."""
    big = tmp_path / "big.jpg"
    with open(big, "wb") as fh:
        fh.truncate(21 * 1024 * 1024)
    assert code_of(big) is ErrorCode.IMAGE_TOO_LARGE
    assert code_of(b"\xff\xd8" + b"\x00" * 2000, ImageLimits(max_bytes=1000)) is ErrorCode.IMAGE_TOO_LARGE


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width``×``height`` followed by a few bytes of pixel data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\x00" * 64))
            + png_chunk(b"IEND", b""))


def test_pixel_limit_is_checked_from_the_header() -> None:
    """50 MP declared in a 69-byte file: IMAGE_TOO_LARGE (not CORRUPT_IMAGE) proves nothing was decoded."""
    assert code_of(png_header_only(10_000, 5_000)) is ErrorCode.IMAGE_TOO_LARGE
    assert code_of(png_header_only(7_000, 5_000)) is ErrorCode.CORRUPT_IMAGE  # 35 MP: allowed, then truncated


def test_pixel_limit_is_configurable(portrait: Image.Image) -> None:
    data = encoded(portrait, "PNG")
    limit = portrait.width * portrait.height - 1
    assert code_of(data, ImageLimits(max_pixels=limit)) is ErrorCode.IMAGE_TOO_LARGE


def test_tiny_images_are_rejected(portrait: Image.Image) -> None:
    assert code_of(encoded(portrait.resize((12, 12)), "PNG")) is ErrorCode.IMAGE_TOO_SMALL


def test_bad_arrays_are_rejected() -> None:
    assert code_of(np.zeros((64, 64, 2), np.uint8)) is ErrorCode.UNSUPPORTED_IMAGE
