"""What a job's uploaded targets are: photos, a zip of photos, or one video — judged from the bytes, never names.

Zips come from strangers, so they are opened defensively: the member count and the total uncompressed size are
checked from the central directory before anything is inflated, each member is then read with a hard cap (a
lying header cannot make it bigger), members with absurd compression ratios, links, absolute paths or ``..``
are refused, and directory parts of member names are dropped (inputs are stored by index; names are labels).
Photos themselves are not decoded here: a damaged photo is that item's error, not the whole job's.
"""

from __future__ import annotations

import io
import stat
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ErrorCode, FacefuseError
from .store import JobKind, clean_name

_MAX_RATIO = 200  # photos barely compress; a member inflating 200× is a bomb, not a JPEG
_SKIPPED_FOLDERS = {"__MACOSX"}  # macOS's resource forks, added by Finder's "Compress"


@dataclass(frozen=True)
class IntakeLimits:
    max_items: int = 100
    max_unzipped_bytes: int = 512 * 1024 * 1024
    max_video_s: float = 600.0
    max_video_frames: int = 18_000
    max_video_pixels: int = 3840 * 2160


def is_video(data: bytes) -> bool:
    """Containers PyAV reads that a photo can never start with: MP4/MOV/3GP, Matroska/WebM, AVI, MPEG-TS, FLV."""
    head = data[:12]
    return (head[4:8] in (b"ftyp", b"moov", b"mdat", b"wide") or head.startswith((b"\x1a\x45\xdf\xa3", b"FLV\x01"))
            or (head.startswith(b"RIFF") and head[8:12] == b"AVI ")
            or (len(data) > 376 and data[0] == data[188] == data[376] == 0x47))


def is_zip(data: bytes) -> bool:
    return data[:4] in (b"PK\x03\x04", b"PK\x05\x06")


def _bad(message: str, member: str | None = None) -> FacefuseError:
    return FacefuseError(ErrorCode.BAD_ARCHIVE, message, "send a plain zip of photos (no links, no '..' paths)",
                         {"member": member} if member else {})


def _too_large(message: str, hint: str = "split the photos into several jobs", **details: object) -> FacefuseError:
    return FacefuseError(ErrorCode.JOB_TOO_LARGE, message, hint, dict(details))


def _unsafe(name: str) -> bool:
    parts = name.replace("\\", "/").split("/")
    return name.startswith(("/", "\\")) or ":" in parts[0] or ".." in parts


def _not_a_photo(name: str) -> bool:
    """Members no one meant as photos: hidden files (``.DS_Store``, ``._IMG_1.jpg``, ``.hidden.jpg``) and anything
    under ``__MACOSX/`` or a hidden folder. Judged on the raw name: :func:`clean_name` strips leading dots."""
    parts = [part for part in name.replace("\\", "/").split("/") if part]
    return not parts or any(part.startswith(".") and part not in (".", "..") for part in parts) or bool(
        _SKIPPED_FOLDERS.intersection(parts))


def expand_zip(data: bytes, limits: IntakeLimits, already: int) -> list[tuple[str, bytes]]:
    """The photos inside a zip, as (label, bytes), in archive order."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise _bad(f"the zip archive cannot be read ({exc})") from None
    files = [m for m in members if not m.is_dir() and not _not_a_photo(m.filename)]
    if already + len(files) > limits.max_items:
        raise _too_large(f"the job has {already + len(files)} photos, more than {limits.max_items}",
                         items=already + len(files), max_items=limits.max_items)
    declared = sum(m.file_size for m in files)
    if declared > limits.max_unzipped_bytes:
        raise _too_large(f"the zip inflates to {declared / 1e6:.0f} MB, more than "
                         f"{limits.max_unzipped_bytes / 1e6:.0f} MB", unzipped_bytes=declared,
                         max_unzipped_bytes=limits.max_unzipped_bytes)
    photos: list[tuple[str, bytes]] = []
    for member in files:
        name = member.filename
        if _unsafe(name):
            raise _bad(f"the zip member '{name}' points outside the archive", name)
        if stat.S_ISLNK(member.external_attr >> 16):
            raise _bad(f"the zip member '{name}' is a link", name)
        if member.flag_bits & 0x1:
            raise _bad(f"the zip member '{name}' is encrypted", name)
        if member.file_size > _MAX_RATIO * max(member.compress_size, 1024):
            raise _too_large(f"the zip member '{name}' inflates {member.file_size // max(member.compress_size, 1)}× "
                             "(a zip bomb?)", member=name)
        try:
            with archive.open(member) as stream:
                content = stream.read(member.file_size + 1)
        except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError) as exc:
            raise _bad(f"the zip member '{name}' is damaged ({exc})", name) from None
        if len(content) > member.file_size:
            raise _bad(f"the zip member '{name}' is larger than its header says", name)
        photos.append((clean_name(name, f"photo-{len(photos) + already + 1}"), content))
    return photos


def check_video(data: bytes, limits: IntakeLimits) -> None:
    """Refuses a video whose headers declare more than the limits allow (413 JOB_TOO_LARGE), or that cannot be read
    as a video at all, before it is stored: one 30-minute clip must not hold a job worker for hours, nor an
    8192×8192 one take gigabytes per frame. A clip whose duration is unknown is admitted; the runner stops it at
    ``max_video_s`` (its ``end`` is capped there)."""
    from ..video.io import inspect_video  # FFmpeg's libraries load only when a video arrives

    size = inspect_video(data)
    hint = "send a shorter clip, or one scaled down"
    if size.width * size.height > limits.max_video_pixels:
        raise _too_large(f"the video is {size.width}×{size.height} ({size.width * size.height / 1e6:.1f} MP a "
                         f"frame), the limit is {limits.max_video_pixels / 1e6:.1f} MP", hint, width=size.width,
                         height=size.height, max_video_pixels=limits.max_video_pixels)
    if size.duration_s is not None and size.duration_s > limits.max_video_s:
        raise _too_large(f"the video lasts {size.duration_s:.0f} s, the limit is {limits.max_video_s:g} s", hint,
                         duration_s=round(size.duration_s, 2), max_video_s=limits.max_video_s)
    if size.frames > limits.max_video_frames:
        raise _too_large(f"the video has about {size.frames} frames, the limit is {limits.max_video_frames}", hint,
                         frames=size.frames, max_video_frames=limits.max_video_frames)


def classify_targets(uploads: Sequence[tuple[str, bytes]],
                     limits: IntakeLimits) -> tuple[JobKind, list[tuple[str, bytes]]]:
    """The job's kind and its targets: one video, or photos (zips expanded)."""
    if not uploads:
        raise FacefuseError(ErrorCode.BAD_REQUEST, "the job has no targets",
                            "send photos, a zip of photos or one video as 'targets'", {"field": "targets"})
    if any(is_video(data) for _, data in uploads):
        if len(uploads) > 1:
            raise FacefuseError(ErrorCode.BAD_REQUEST, "a video job takes exactly one video as its target",
                                "send the video alone, or photos without a video", {"field": "targets"})
        name, data = uploads[0]
        check_video(data, limits)
        return JobKind.VIDEO, [(clean_name(name, "video"), data)]
    photos: list[tuple[str, bytes]] = []
    for name, data in uploads:
        if is_zip(data):
            photos.extend(expand_zip(data, limits, len(photos)))
        else:
            photos.append((clean_name(name, f"photo-{len(photos) + 1}"), data))
        if len(photos) > limits.max_items:
            raise _too_large(f"the job has more than {limits.max_items} photos", max_items=limits.max_items)
    if not photos:
        raise FacefuseError(ErrorCode.BAD_REQUEST, "the zip holds no photos (hidden files and __MACOSX/ are "
                            "skipped)", "put the photos in the zip", {"field": "targets"})
    return JobKind.PHOTOS, photos
