"""Decoding users can trust and encoding that always carries the AI-generated label.

Decoding reads only the header first (Pillow parses it lazily), so byte and pixel limits are enforced before a
decompression bomb can allocate anything. Well-formed 8-bit JPEG/PNG/WebP/BMP files are then decoded by OpenCV,
about twice as fast as Pillow here; everything else (16-bit, CMYK, palette, TIFF, PGM, damaged files) goes through
Pillow, which converts modes carefully and raises on truncation instead of returning a half-grey picture.
Every decoded image is RGB ``uint8`` of shape (H, W, 3).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Union

import cv2
import numpy as np
from PIL import Image, PngImagePlugin, UnidentifiedImageError

from .config import ImageLimits
from .errors import ErrorCode, FacefuseError

ImageInput = Union[str, Path, bytes, bytearray, memoryview, np.ndarray]

SUPPORTED_FORMATS = {"JPEG", "PNG", "WEBP", "BMP", "TIFF", "PPM"}  # PPM covers PGM/PBM
# file names of those formats, for commands that read a folder of photos
PHOTO_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".pgm", ".ppm", ".pbm"})
_FAST_FORMATS = {"JPEG", "PNG", "WEBP", "BMP"}
# the scales a photo may be decoded at (``decode_image``'s ``at_least``); libjpeg's DCT scaling gives a JPEG at ½, ¼ or
# ⅛ of its size and skips most of the inverse transform and the colour conversion (a 4000×3000 JPEG made from a
# shared photo, one-off: 63 ms in full, 35 ms at ½, 20 ms at ¼)
_JPEG_REDUCTIONS = {2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8}
# MPO (what many phones and stereo cameras write) is a JPEG followed by more JPEGs: read as its first picture
_FORMAT_ALIASES = {"MPO": "JPEG"}
_EXIF_ORIENTATION = 0x0112
_EXIF_DESCRIPTION = 0x010E
_EXIF_SOFTWARE = 0x0131

AI_LABEL_TEXT = "AI-generated"
AI_LABEL_DESCRIPTION = "AI-generated image (face fusion by facefuse)"
# IPTC digital source type for content created by a trained model, understood by C2PA-aware tools.
_IPTC_AI_SOURCE = "http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia"
_XMP_LABEL = (
    '<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>'
    '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
    '<rdf:Description rdf:about="" xmlns:dc="http://purl.org/dc/elements/1.1/" '
    'xmlns:Iptc4xmpExt="http://iptc.org/std/Iptc4xmpExt/2008-02-29/">'
    f"<Iptc4xmpExt:DigitalSourceType>{_IPTC_AI_SOURCE}</Iptc4xmpExt:DigitalSourceType>"
    f'<dc:description><rdf:Alt><rdf:li xml:lang="x-default">{AI_LABEL_DESCRIPTION}</rdf:li></rdf:Alt>'
    "</dc:description></rdf:Description></rdf:RDF></x:xmpmeta>"
    '<?xpacket end="w"?>'
)
IPTC_AI_SOURCE, XMP_LABEL = _IPTC_AI_SOURCE, _XMP_LABEL  # public names for the video container label


@dataclass(frozen=True)
class OutputFormat:
    """One format a result can be written in. :data:`OUTPUTS` is the one list of them: the options' choices, the
    HTTP media types and ``Accept`` subtypes, file suffixes, the error hint and the jobs' disk estimate derive from
    it, so adding a format is one row here (and its branch in :func:`encode_image`)."""

    name: str  # what the shells show and answer with ("jpeg")
    pil: str  # Pillow's name, which the encoder and the stages pass around ("JPEG")
    extension: str  # a written file's suffix
    media_type: str
    # disk per output pixel for a job's estimate: above the largest measured on the test photos at quality 92
    # (JPEG 0.42, WebP 0.29, PNG 1.79; medians 0.27, 0.15, 1.17), so an estimate errs on the side of refusing
    bytes_per_pixel: float
    aliases: tuple[str, ...] = ()  # other spellings accepted as the name


OUTPUTS = (
    OutputFormat("jpeg", "JPEG", "jpg", "image/jpeg", 0.6, aliases=("jpg",)),
    OutputFormat("png", "PNG", "png", "image/png", 2.2),
    OutputFormat("webp", "WEBP", "webp", "image/webp", 0.5),
)
OUTPUT_BY_PIL = {f.pil: f for f in OUTPUTS}
OUTPUT_FORMATS = {spelling: f.pil for f in OUTPUTS for spelling in (f.name, *f.aliases)}  # name or alias → Pillow's
OUTPUT_ALIASES = {alias: f.name for f in OUTPUTS for alias in f.aliases}
OUTPUT_SPELLINGS = tuple(OUTPUT_FORMATS)  # the choices of an output format option
MEDIA_TYPES = {f.pil: f.media_type for f in OUTPUTS}


@dataclass(frozen=True)
class DecodedImage:
    pixels: np.ndarray  # RGB uint8 (H, W, 3), EXIF orientation applied
    format: str
    exif_orientation: int = 1
    reduction: int = 1  # the pixels are the photo at 1/reduction of its size (see ``decode_image``'s ``at_least``)


def _reject(code: ErrorCode, message: str, hint: str, **details: object) -> FacefuseError:
    return FacefuseError(code, message, hint, dict(details))


def read_input_bytes(source: str | Path | bytes | bytearray | memoryview, limits: ImageLimits) -> bytes:
    """Bytes of a path or buffer, refusing oversize files before reading them whole."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        path = Path(source)
        if not path.is_file():
            raise _reject(ErrorCode.BAD_REQUEST, f"no such file: {path}", "check the path", path=str(path))
        if path.stat().st_size > limits.max_bytes:
            raise _too_many_bytes(path.stat().st_size, limits)
        data = path.read_bytes()
    if len(data) > limits.max_bytes:
        raise _too_many_bytes(len(data), limits)
    return data


def _too_many_bytes(size: int, limits: ImageLimits) -> FacefuseError:
    return _reject(ErrorCode.IMAGE_TOO_LARGE,
                   f"file is {size / 2**20:.1f} MiB, the limit is {limits.max_bytes / 2**20:g} MiB",
                   "send a smaller or more compressed photo", bytes=size, max_bytes=limits.max_bytes)


def declared_pixels(data: bytes) -> int:
    """Width × height from the header alone (0 when there is no readable header: the decoder then says why).

    Lets a caller budget the memory a photo will take once decoded before decoding it: a 73 KB PNG can declare
    25 MP (75 MB of RGB pixels)."""
    try:
        width, height = Image.open(io.BytesIO(data)).size
    except Exception:  # any unreadable header is the decoder's to report, with its proper error code
        return 0
    return int(width) * int(height)


def decode_image(source: ImageInput, limits: ImageLimits | None = None, at_least: int | None = None) -> DecodedImage:
    """Decode a path, bytes or an array into RGB uint8, with limits checked before full decode.

    ``at_least``: a photo whose longer side is at least twice this comes at ½, ¼ or ⅛ of its size, the smallest that
    keeps its longer side at least this long (:attr:`DecodedImage.reduction` says which): a JPEG decoded so by
    libjpeg's DCT scaling (most of the decoding skipped), anything else decoded, or taken, in full and then halved by
    area averaging. For a caller that never uses the photo's full resolution: a fusion's source
    (:mod:`facefuse.stages.decode`)."""
    limits = limits or ImageLimits()
    if isinstance(source, np.ndarray):
        return _halved(DecodedImage(_array_to_rgb(source, limits), "ARRAY"), at_least)
    data = read_input_bytes(source, limits)
    header, fmt = _open_header(data, limits)
    orientation = _orientation(header)
    width, height = header.size
    reduction = reduction_for(width, height, at_least) if fmt == "JPEG" else 1
    pixels = None
    if fmt in _FAST_FORMATS and header.mode in ("RGB", "L", "P", "RGBA", "LA") and _looks_complete(fmt, data):
        flags = cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION
        if reduction > 1:  # the reduced-colour flag's own colour bit is BGR: RGB instead
            flags |= _JPEG_REDUCTIONS[reduction] & ~cv2.IMREAD_COLOR
        try:
            pixels = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
        except cv2.error:
            pixels = None  # Pillow then says what is wrong with the file
        if pixels is not None and header.mode in ("RGBA", "LA", "P") and _has_alpha(header):
            pixels = None  # alpha needs compositing: let Pillow handle it
    expected = (-(-height // reduction), -(-width // reduction))
    if pixels is None or pixels.shape[:2] != expected:
        pixels, reduction = _decode_with_pillow(header), 1
    decoded = DecodedImage(np.ascontiguousarray(_apply_orientation(pixels, orientation)), fmt, orientation, reduction)
    return decoded if reduction > 1 else _halved(decoded, at_least)


def reduction_for(width: int, height: int, at_least: int | None) -> int:
    """The largest scale divisor (1, 2, 4 or 8) that keeps the longer side at least ``at_least`` (None: 1)."""
    if not at_least:
        return 1
    return max((k for k in (1, *_JPEG_REDUCTIONS) if max(width, height) / k >= at_least), default=1)


def _halved(decoded: DecodedImage, at_least: int | None) -> DecodedImage:
    """Full-size pixels brought to :func:`reduction_for`'s scale by exact 2:1 area steps (OpenCV's fast path: a 12 MP
    photo in ~2 ms here, one-off): each pixel the mean of the 2×2 it covers, as libjpeg's ½ scale gives, an odd last
    row or column dropped."""
    pixels = decoded.pixels
    reduction = reduction_for(pixels.shape[1], pixels.shape[0], at_least)
    for _ in range(reduction.bit_length() - 1):
        height, width = pixels.shape[:2]
        pixels = cv2.resize(pixels[: height - height % 2, : width - width % 2], (width // 2, height // 2),
                            interpolation=cv2.INTER_AREA)
    return decoded if reduction == 1 else replace(decoded, pixels=pixels, reduction=reduction)


def check_header(data: bytes, limits: ImageLimits | None = None) -> str:
    """The format of a photo judged from its header alone (nothing is decoded), or the error decoding would give
    for an empty, unknown, unsupported, damaged-header or oversized image: a check a caller can afford before
    accepting work it would only fail later (a batch job's source)."""
    return _open_header(data, limits or ImageLimits())[1]


def _open_header(data: bytes, limits: ImageLimits) -> tuple[Image.Image, str]:
    if not data:
        raise _reject(ErrorCode.CORRUPT_IMAGE, "the image is empty (0 bytes)", "send the photo file itself")
    try:
        # Only the header is parsed here; our own pixel limit is checked right after, before any decoding.
        # (No warnings.catch_warnings: it is process-global, and the service decodes on several threads at once.)
        header = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise _reject(ErrorCode.UNSUPPORTED_IMAGE, "the data is not an image in a supported format",
                      "send a JPEG, PNG, WebP, BMP, TIFF or PGM photo") from None
    except Image.DecompressionBombError:
        raise _reject(ErrorCode.IMAGE_TOO_LARGE, "the image declares too many pixels", "send a smaller photo") from None
    except Exception as exc:  # Pillow's plugins raise what a damaged field makes them (TypeError, struct.error…)
        raise _damaged(exc) from None
    fmt = _FORMAT_ALIASES.get(header.format or "", header.format or "")
    if fmt not in SUPPORTED_FORMATS:
        raise _reject(ErrorCode.UNSUPPORTED_IMAGE, f"{fmt or 'this'} images are not supported",
                      "send a JPEG, PNG, WebP, BMP, TIFF or PGM photo", format=fmt)
    _check_size(*header.size, limits)
    return header, fmt


def _check_size(width: int, height: int, limits: ImageLimits) -> None:
    if width * height > limits.max_pixels:
        raise _reject(ErrorCode.IMAGE_TOO_LARGE,
                      f"the image is {width}×{height} ({width * height / 1e6:.1f} MP), the limit is "
                      f"{limits.max_pixels / 1e6:.0f} MP", "resize the photo before sending it",
                      width=width, height=height, max_pixels=limits.max_pixels)
    if min(width, height) < limits.min_side:
        raise _reject(ErrorCode.IMAGE_TOO_SMALL, f"the image is only {width}×{height} pixels",
                      f"send a photo at least {limits.min_side} pixels on each side", width=width, height=height)


def _looks_complete(fmt: str, data: bytes) -> bool:
    """Whether the file reaches its declared end. A truncated file goes to Pillow, which reports it cleanly; OpenCV
    would pad a JPEG with grey and print its own error lines for the others. A file that merely fails this cheap
    check (an unusual writer) still decodes, through Pillow."""
    if fmt == "JPEG":
        return b"\xff\xd9" in data[-64:]  # end-of-image marker
    if fmt == "PNG":
        return b"IEND" in data[-64:]
    if fmt == "BMP":
        return len(data) >= int.from_bytes(data[2:6], "little")  # file size from the header
    if fmt == "WEBP":
        return len(data) >= int.from_bytes(data[4:8], "little") + 8  # RIFF chunk size
    return True


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA") or (image.mode == "P" and "transparency" in image.info)


def _orientation(image: Image.Image) -> int:
    if image.format == "PNG" and "exif" not in image.info:
        return 1  # Pillow would decode the whole PNG looking for an eXIf chunk after the pixels: 20 ms at 720p
    try:
        return int(image.getexif().get(_EXIF_ORIENTATION, 1) or 1)
    except Exception:  # damaged EXIF is common and harmless: ignore orientation, keep the photo
        return 1


def _apply_orientation(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """EXIF orientations 2–8 as flips/rotations (same table as Pillow's ImageOps.exif_transpose)."""
    ops = {
        2: lambda a: a[:, ::-1],
        3: lambda a: a[::-1, ::-1],
        4: lambda a: a[::-1],
        5: lambda a: np.swapaxes(a, 0, 1),
        6: lambda a: np.rot90(a, -1),
        7: lambda a: np.rot90(a, 1)[::-1, ::-1],
        8: lambda a: np.rot90(a, 1),
    }
    op = ops.get(orientation)
    return op(pixels) if op else pixels


def _damaged(exc: Exception) -> FacefuseError:
    """CORRUPT_IMAGE for whatever a decoder raised on bad bytes. Why every exception: a fuzzed TIFF whose
    StripOffsets are typed RATIONAL made Pillow raise TypeError, which became a 500; no exception a decoder raises
    on a file is the server's fault. The bytes are decoded from memory, so the reason names no path."""
    reason = str(exc)[:120] or type(exc).__name__
    return _reject(ErrorCode.CORRUPT_IMAGE, f"the image is damaged or truncated ({reason})",
                   "re-export or re-download the photo")


def _decode_with_pillow(image: Image.Image) -> np.ndarray:
    try:
        image.load()
        return _pil_to_rgb(image)
    except Image.DecompressionBombError:
        raise _reject(ErrorCode.IMAGE_TOO_LARGE, "the image declares too many pixels", "send a smaller photo") from None
    except MemoryError:
        raise
    except Exception as exc:
        raise _damaged(exc) from None


def _pil_to_rgb(image: Image.Image) -> np.ndarray:
    """Any Pillow mode to RGB uint8: 16/32-bit scaled by range, CMYK via Pillow's conversion, alpha over white."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        arr = np.asarray(image, dtype=np.float64)
        peak = 65535.0 if image.mode.startswith("I;16") or arr.max() > 255 else 255.0
        grey = np.clip(arr / peak * 255.0 + 0.5, 0, 255).astype(np.uint8)
        return np.repeat(grey[..., None], 3, axis=2)
    if _has_alpha(image):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return np.asarray(Image.alpha_composite(background, rgba).convert("RGB"))
    return np.asarray(image.convert("RGB"))


def _array_to_rgb(array: np.ndarray, limits: ImageLimits) -> np.ndarray:
    """Arrays are taken as RGB (library callers); greyscale, alpha and 16-bit arrays are converted like files."""
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (1, 3, 4)):
        raise _reject(ErrorCode.UNSUPPORTED_IMAGE, f"array of shape {array.shape} is not an image",
                      "pass an (H, W, 3) RGB uint8 array")
    _check_size(array.shape[1], array.shape[0], limits)
    if array.dtype == np.uint16:
        array = (array.astype(np.float32) / 257.0 + 0.5).astype(np.uint8)
    elif array.dtype != np.uint8:
        array = np.clip(array, 0, 255).astype(np.uint8)
    if array.ndim == 2:
        array = array[..., None]
    if array.shape[2] == 1:
        array = np.repeat(array, 3, axis=2)
    elif array.shape[2] == 4:
        alpha = array[..., 3:4].astype(np.float32) / 255.0
        array = (array[..., :3] * alpha + 255.0 * (1.0 - alpha) + 0.5).astype(np.uint8)
    return np.ascontiguousarray(array)


# -- encoding and labelling --------------------------------------------------------------------------------------


def output_format(name: str) -> str:
    fmt = OUTPUT_FORMATS.get(name.lower().lstrip("."))
    if fmt is None:
        raise _reject(ErrorCode.INVALID_OPTION, f"cannot write '{name}' images",
                      f"use {', '.join(f.name for f in OUTPUTS)}", format=name)
    return fmt


def format_for_path(path: str | Path) -> str:
    return output_format(Path(path).suffix or "png")


def add_visible_mark(pixels: np.ndarray, text: str = AI_LABEL_TEXT) -> np.ndarray:
    """A small, legible "AI-generated" tag in the bottom-right corner, scaled with the picture."""
    out = pixels.copy()
    height, width = out.shape[:2]
    scale = max(0.35, min(width, height) / 900.0)
    thickness = max(1, int(round(scale * 1.6)))
    (tw, th), baseline = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thickness)
    pad = max(3, int(6 * scale))
    x1, y1 = width - tw - 3 * pad, height - th - baseline - 3 * pad
    x0, y0 = max(0, x1 - pad), max(0, y1 - pad)
    box = out[y0:height - pad, x0:width - pad].astype(np.float32)
    out[y0:height - pad, x0:width - pad] = (box * 0.45).astype(np.uint8)
    cv2.putText(out, text, (x1, height - baseline - 2 * pad), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255),
                thickness, cv2.LINE_AA)
    return out


def _label_exif() -> Image.Exif:
    exif = Image.Exif()
    exif[_EXIF_DESCRIPTION] = AI_LABEL_DESCRIPTION
    exif[_EXIF_SOFTWARE] = "facefuse"
    return exif


def _app1(payload: bytes) -> bytes:
    """A JPEG APP1 segment: marker, length (itself included), payload."""
    return b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload


# the label's JPEG segments (EXIF, then XMP), as Pillow writes them
_JPEG_LABEL = _app1(_label_exif().tobytes()) + _app1(b"http://ns.adobe.com/xap/1.0/\x00" + _XMP_LABEL.encode())


def _encode_jpeg(pixels: np.ndarray, quality: int) -> bytes:
    """OpenCV's JPEG encoder with the label's segments put in after the JFIF header: the same bytes as Pillow's
    ``save(..., exif=, xmp=)`` (both are libjpeg-turbo with the same tables; tested) in less time (quality 92:
    720p 7.4 → 6.3 ms CPU, 4K 55 → 46 ms; Pillow copies the pixels into its own image first)."""
    sampling = cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444 if quality >= 90 else cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420
    ok, encoded = cv2.imencode(".jpg", cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR),
                               [cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, sampling])
    if not ok:
        raise ValueError("JPEG encoding failed")
    data = encoded.tobytes()
    at = 4 + int.from_bytes(data[4:6], "big") if data[2:4] == b"\xff\xe0" else 2  # after SOI and JFIF's APP0
    return data[:at] + _JPEG_LABEL + data[at:]


def encode_image(pixels: np.ndarray, fmt: str = "PNG", quality: int = 92) -> bytes:
    """Encode RGB pixels with the AI-generated label in the metadata (always; it cannot be switched off)."""
    fmt = output_format(fmt)
    if fmt == "JPEG" and pixels.ndim == 3 and pixels.shape[2] == 3 and pixels.dtype == np.uint8:
        return _encode_jpeg(pixels, quality)
    image = Image.fromarray(pixels)
    exif = _label_exif()
    buffer = io.BytesIO()
    if fmt == "PNG":
        info = PngImagePlugin.PngInfo()
        info.add_text("AI-Generated", "true")
        info.add_text("Description", AI_LABEL_DESCRIPTION)
        info.add_itxt("XML:com.adobe.xmp", _XMP_LABEL)
        image.save(buffer, "PNG", pnginfo=info, exif=exif, compress_level=3)
    elif fmt == "JPEG":
        image.save(buffer, "JPEG", quality=quality, exif=exif, xmp=_XMP_LABEL.encode(), subsampling=0 if quality >= 90 else 2)
    else:
        image.save(buffer, "WEBP", quality=quality, exif=exif, xmp=_XMP_LABEL.encode())
    return buffer.getvalue()


def read_label(data: bytes) -> dict[str, str]:
    """The AI-generated label fields found in an encoded image, so a reader (or a test) can check the label."""
    image = Image.open(io.BytesIO(data))
    found: dict[str, str] = {}
    description = image.getexif().get(_EXIF_DESCRIPTION)
    if description:
        found["exif_description"] = str(description)
    xmp = image.info.get("xmp") or image.info.get("XML:com.adobe.xmp")
    if xmp:
        text = xmp.decode() if isinstance(xmp, bytes) else str(xmp)
        if _IPTC_AI_SOURCE in text:
            found["xmp_digital_source_type"] = _IPTC_AI_SOURCE
    if image.format == "PNG" and image.info.get("AI-Generated"):
        found["png_text"] = str(image.info["AI-Generated"])
    return found
