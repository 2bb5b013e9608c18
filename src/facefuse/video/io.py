"""Video decode and encode with PyAV (FFmpeg's libraries from the wheel; no system ffmpeg).

What is kept from the input, and how:
- resolution, frame timestamps (so variable frame rate survives: every output frame carries its input pts), the
  rotation (display matrix), colour range, matrix, primaries and transfer;
- the audio streams: their packets are copied byte for byte (only shifted in time when the clip is trimmed).

Video is encoded by one encoder per run, without B-frames (decode order = presentation order, so each packet's
timestamps can be set from the input frame it came from), its packets filed into fixed-length segment files — the
checkpoint a killed run resumes from, its first frame a key frame of a new encoder; the finished segments are then
remuxed, without re-encoding, into the output next to the audio. The output is written to a temporary name and
renamed, so a crash never leaves a truncated file under the requested name.

Decoding (with the conversion to RGB) and encoding (with the conversion back to the stream's pixel format) each
run on a thread of their own behind a small bounded queue, so they overlap the fusion on the other core without
letting memory grow: a slow stage makes the one before it wait.
"""

from __future__ import annotations

import contextlib
import heapq
import io
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from ..errors import ErrorCode, FacefuseError
from ..imageio import AI_LABEL_TEXT, IPTC_AI_SOURCE, XMP_LABEL
from .yuv import converts, yuv420_frame

AI_LABEL_VIDEO = "AI-generated video (face fusion by facefuse)"
CONTAINERS = {".mp4": "mp4", ".mov": "mov", ".m4v": "mp4", ".mkv": "matroska"}
CRF_CODECS = ("libx264", "libx265")  # the others take a fixed quantiser scale
DECODE_QUEUE = 8  # decoded frames buffered ahead of the fusion thread
ENCODE_QUEUE = 4  # finished frames buffered ahead of the encoder thread (it only evens out the pace)
X264_PARAMS = "bframes=0:scenecut=0"


@dataclass(frozen=True)
class VideoInfo:
    """What the output must keep of the input's video stream."""

    width: int
    height: int
    time_base: Fraction
    rate: Fraction  # average frame rate (only used to size segments and estimate counts)
    frames: int  # the container's frame count, or an estimate from the duration
    start_pts: int
    rotation: int
    pix_fmt: str
    color_range: int
    colorspace: int
    color_primaries: int
    color_trc: int
    audio_streams: int


def container_format(path: Path) -> str:
    fmt = CONTAINERS.get(path.suffix.lower())
    if fmt is None:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"cannot write a video named '{path.name}'",
                            f"name the output with one of: {', '.join(sorted(CONTAINERS))}", {"option": "output"})
    return fmt


def open_input(path: Path | bytes) -> av.container.InputContainer:
    """The container (a file, or bytes in memory) with a video stream, or UNSUPPORTED_VIDEO / CORRUPT_VIDEO that
    says why not."""
    if isinstance(path, Path) and not path.is_file():
        raise FacefuseError(ErrorCode.BAD_REQUEST, f"no video file at '{path.name}'", "check the path")
    try:
        container = av.open(str(path) if isinstance(path, Path) else io.BytesIO(path), metadata_errors="ignore")
    except av.error.InvalidDataError as exc:
        raise _not_video(path, exc) from None
    except (av.error.FFmpegError, ValueError, OverflowError) as exc:  # a fuzzed header can make PyAV raise these
        raise FacefuseError(ErrorCode.CORRUPT_VIDEO, f"the video could not be opened ({_reason(exc)})",
                            "re-export or re-download the video") from None
    if not container.streams.video:
        container.close()
        raise FacefuseError(ErrorCode.UNSUPPORTED_VIDEO, "the file has no video stream",
                            "send a video file (MP4, MOV, MKV, WebM…)")
    return container


def _not_video(path: Path | bytes, exc: Exception) -> FacefuseError:
    head = path[:12] if isinstance(path, bytes) else path.read_bytes()[:12] if path.stat().st_size else b""
    # an MP4/MOV whose index is missing or cut off is a damaged video, not an unknown format
    if head[4:8] in (b"ftyp", b"mdat", b"moov", b"free", b"wide") or head[:4] == b"\x1a\x45\xdf\xa3":
        return FacefuseError(ErrorCode.CORRUPT_VIDEO, f"the video is damaged or truncated ({_reason(exc)})",
                             "re-export or re-download the video")
    return FacefuseError(ErrorCode.UNSUPPORTED_VIDEO, "the data is not a video in a supported format",
                         "send an MP4, MOV, MKV or WebM video")


def _reason(exc: Exception) -> str:
    """FFmpeg's reason without the file name (errors never name server paths)."""
    return str(getattr(exc, "strerror", None) or type(exc).__name__)


@dataclass(frozen=True)
class VideoSize:
    """What a video declares in its headers, read without decoding a frame: what admission limits are checked
    against (an 8192×8192 or a 30-minute clip is refused before any worker decodes it)."""

    width: int
    height: int
    duration_s: float | None  # None when neither the stream nor the container says
    frames: int  # the stream's frame count, or an estimate from the duration (0: unknown)


def _duration_s(container: av.container.InputContainer, stream: av.VideoStream) -> float | None:
    """The stream's duration, else the container's: Matroska/WebM streams carry neither a frame count nor a
    duration, only the container knows how long the clip is (so progress would read 100 % from the first frame)."""
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    if container.duration:
        return container.duration / av.time_base
    return None


def _frame_count(container: av.container.InputContainer, stream: av.VideoStream, rate: Fraction) -> int:
    if stream.frames:
        return int(stream.frames)
    duration = _duration_s(container, stream)
    return int(duration * rate + 0.5) if duration else 0


def _rate(stream: av.VideoStream) -> Fraction:
    return Fraction(stream.average_rate or stream.guessed_rate or Fraction(30))


def inspect_video(data: Path | bytes) -> VideoSize:
    """The declared size, duration and frame count, from the headers only; UNSUPPORTED_VIDEO / CORRUPT_VIDEO when
    the data is not a readable video."""
    with open_input(data) as container:
        stream = container.streams.video[0]
        ctx = stream.codec_context
        return VideoSize(int(ctx.width or 0), int(ctx.height or 0), _duration_s(container, stream),
                         _frame_count(container, stream, _rate(stream)))


def probe(path: Path) -> VideoInfo:
    with open_input(path) as container:
        stream = container.streams.video[0]
        first = next(_decoded(container, stream), None)
        if first is None:
            raise FacefuseError(ErrorCode.CORRUPT_VIDEO, "the video has no frame that can be decoded",
                                "re-export or re-download the video")
        rate = _rate(stream)
        frames = _frame_count(container, stream, rate)
        ctx = stream.codec_context
        return VideoInfo(
            width=first.width, height=first.height, time_base=stream.time_base, rate=Fraction(rate),
            frames=int(frames or 0), start_pts=int(first.pts or 0), rotation=round(first.rotation or 0),
            pix_fmt=first.format.name, color_range=int(ctx.color_range), colorspace=int(ctx.colorspace),
            color_primaries=int(ctx.color_primaries), color_trc=int(ctx.color_trc),
            audio_streams=len(container.streams.audio))


def _decoded(container: av.container.InputContainer, stream: av.VideoStream) -> Iterator[av.VideoFrame]:
    try:
        for frame in container.decode(stream):
            if frame.pts is not None:
                yield frame
    except av.error.FFmpegError as exc:
        raise FacefuseError(ErrorCode.CORRUPT_VIDEO, f"the video is damaged ({_reason(exc)})",
                            "re-export or re-download the video") from None


@dataclass(frozen=True)
class DecodedFrame:
    """A decoded frame (kept to be passed through untouched) and its RGB pixels."""

    frame: av.VideoFrame
    image: np.ndarray

    @property
    def pts(self) -> int:
        return int(self.frame.pts)


def read_frames(path: Path, after_pts: int | None, end_pts: int | None, seek_pts: int | None,
                stop: threading.Event) -> Iterator[DecodedFrame]:
    """Decoded frames with ``after_pts`` < pts < ``end_pts``, decoded and turned into RGB on a thread of their own.

    ``seek_pts`` jumps to the key frame before that time first (resume, ``start``). Decoding runs ahead by a few
    frames so it overlaps the fusion; ``stop`` ends the decoder thread early.
    """
    frames: queue.Queue[DecodedFrame | FacefuseError | None] = queue.Queue(DECODE_QUEUE)

    def put(item: DecodedFrame | FacefuseError | None) -> bool:
        while not stop.is_set():
            try:
                frames.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def decode() -> None:
        try:
            with open_input(path) as container:
                stream = container.streams.video[0]
                stream.thread_type = "AUTO"
                if seek_pts is not None:
                    container.seek(seek_pts, stream=stream, backward=True)
                for frame in _decoded(container, stream):
                    if after_pts is not None and frame.pts <= after_pts:
                        continue
                    if end_pts is not None and frame.pts >= end_pts:
                        break
                    if not put(DecodedFrame(frame, to_rgb(frame))):
                        return
        except FacefuseError as exc:
            put(exc)
            return
        put(None)

    thread = threading.Thread(target=decode, name="facefuse-video-decode", daemon=True)
    thread.start()
    try:
        while True:
            item = frames.get()
            if item is None:
                return
            if isinstance(item, FacefuseError):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


def to_rgb(frame: av.VideoFrame) -> np.ndarray:
    """RGB pixels, converted with the frame's own colour matrix and range."""
    return frame.to_ndarray(format="rgb24", src_colorspace=frame.colorspace or None,
                            src_color_range=frame.color_range or None)


class StreamEncoder:
    """A run's one encoder, fed frames in order through a bounded queue on a thread of its own (``write`` returns at
    once unless the queue is full), its packets filed into segment files as they come out: the frame written with
    ``begins`` starts a new file there, and a file is complete once the encoder has given every packet of its
    frames (``finished``). ``close`` flushes the encoder and completes the last file; either raises what the
    encoder thread met.

    Why one encoder for the whole run, not a fresh one per segment: a fresh encoder began each segment with a key
    frame coded after frames the previous one had given fewer bits (its look-ahead saw nothing beyond its last
    frame), so the face's colour jumped at every segment start — a pulse every ``segment_s``: on a 720p portrait
    clip a step of 0.88 in the face's mean colour, the registered flicker +0.0135 over the input's against +0.0006
    from one encoder, whose files are also 4 % smaller (``benchmarks/segment_encoding.py``). The files are the
    checkpoint's unit (a resumed run's first frame is a key frame of its own encoder); only their concatenation,
    which ``assemble`` writes, decodes."""

    def __init__(self, info: VideoInfo, codec: str, crf: float | None, bitrate: int | None, preset: str) -> None:
        self.info = info
        # the encoder lives in a container in memory that is never written to: it gives the encoder the global
        # header (the files' codec private data) and is the template of every segment file's stream
        self._holder = av.open(io.BytesIO(), "w", format="matroska")
        stream = self._holder.add_stream(codec, rate=info.rate)
        stream.width, stream.height = info.width, info.height
        supported = [f.name for f in (stream.codec.video_formats or [])]
        stream.pix_fmt = info.pix_fmt if info.pix_fmt in supported else "yuv420p"
        stream.time_base = info.time_base
        ctx = stream.codec_context
        ctx.time_base = info.time_base
        ctx.max_b_frames = 0
        ctx.color_range, ctx.colorspace = info.color_range, info.colorspace
        ctx.color_primaries, ctx.color_trc = info.color_primaries, info.color_trc
        options: dict[str, str] = {}
        if bitrate:
            ctx.bit_rate = bitrate
        elif codec in CRF_CODECS:
            options["crf"] = f"{crf:g}"
        else:
            ctx.qscale = True
            ctx.global_quality = int((crf or 4) * 118)  # FF_QP2LAMBDA × q
        if codec in CRF_CODECS:
            options["preset"] = preset
        if codec == "libx264":
            options["x264-params"] = X264_PARAMS
        elif codec == "libx265":
            options["x265-params"] = "bframes=0:log-level=error"
        ctx.options = options
        self._holder.start_encoding()
        self.stream = stream
        self._by_opencv = converts(stream.pix_fmt, info.width, info.height)  # fused RGB → YUV (.yuv explains why)
        self._queue: queue.Queue[tuple[av.VideoFrame | np.ndarray, int, Path | None] | None] = queue.Queue(
            ENCODE_QUEUE)
        self._starts: deque[tuple[int, Path]] = deque()  # (frame number, file) of each file still to open
        self._fed = self._filed = 0  # frames given to the encoder, packets filed (one per frame: no B-frames)
        self._file: tuple[Path, av.container.OutputContainer, av.VideoStream] | None = None
        self._finished: queue.SimpleQueue[Path] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self.busy_s = 0.0  # the encoder thread's time spent converting and encoding
        self._thread = threading.Thread(target=self._encode_all, name="facefuse-video-encode", daemon=True)
        self._thread.start()

    def write(self, frame: av.VideoFrame | np.ndarray, pts: int, begins: Path | None = None) -> None:
        """Queue one frame (RGB pixels, or a decoded frame passed through untouched) with its timestamp; with
        ``begins``, its packet starts that file."""
        if self._error is not None:
            raise self._error
        self._queue.put((frame, pts, begins))

    def finished(self) -> list[Path]:
        """The files completed since the last call, in order."""
        done = []
        while not self._finished.empty():
            done.append(self._finished.get())
        return done

    def _encode_all(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is None:  # after an error the rest is drained unencoded, so no writer blocks
                start = time.perf_counter()
                try:
                    self._encode(*item)
                except BaseException as exc:  # noqa: BLE001 - handed to the writing thread by write/close
                    self._error = exc
                self.busy_s += time.perf_counter() - start

    def _encode(self, frame: av.VideoFrame | np.ndarray, pts: int, begins: Path | None) -> None:
        if isinstance(frame, np.ndarray):
            if self._by_opencv:
                frame = yuv420_frame(frame, self.stream.pix_fmt, self.info.colorspace, self.info.color_range)
            else:
                frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
        if frame.format.name != self.stream.pix_fmt:
            frame = frame.reformat(format=self.stream.pix_fmt, dst_colorspace=self.info.colorspace or None,
                                   dst_color_range=self.info.color_range or None)
        frame.pts, frame.time_base = pts, self.info.time_base
        if begins is not None:
            self._starts.append((self._fed, begins))
        self._fed += 1
        for packet in self.stream.encode(frame):
            self._file_packet(packet)

    def _file_packet(self, packet: av.Packet) -> None:
        if self._starts and self._starts[0][0] == self._filed:
            self._complete_file()
            path = self._starts.popleft()[1]
            container = av.open(str(path), "w", format="matroska")
            stream = container.add_stream_from_template(self.stream)
            stream.time_base = self.stream.time_base
            self._file = (path, container, stream)
        assert self._file is not None, "the first frame written starts a file"
        packet.stream = self._file[2]
        self._file[1].mux(packet)
        self._filed += 1

    def _complete_file(self) -> None:
        if self._file is not None:
            path, container, _ = self._file
            container.close()
            self._file = None
            self._finished.put(path)

    def _join(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def close(self) -> None:
        """Encode what is queued, flush the encoder and complete the last file."""
        self._join()
        if self._error is None:
            try:
                for packet in self.stream.encode(None):
                    self._file_packet(packet)
                self._complete_file()
            except BaseException as exc:  # noqa: BLE001 - raised below, after the holder is closed
                self._error = exc
        if self._error is not None:
            self.abort()
            raise self._error
        self._holder.close()

    def abort(self) -> None:
        """Stop without flushing (the run failed or was cancelled; the file being written is left partial, to be
        discarded). Safe to call after ``close``."""
        self._join()
        if self._file is not None:
            self._file[1].close()
            self._file = None
        with contextlib.suppress(av.error.FFmpegError):  # already closed by ``close``
            self._holder.close()


def label_metadata() -> dict[str, str]:
    """Container tags saying the video is AI-generated (written always; the visible mark is separate)."""
    return {"comment": AI_LABEL_VIDEO, "description": AI_LABEL_VIDEO, "ai_generated": "true",
            "digital_source_type": IPTC_AI_SOURCE, "xmp": XMP_LABEL, "software": "facefuse",
            "title": AI_LABEL_TEXT}


def read_metadata(path: Path) -> dict[str, str]:
    """Container-level tags of a video (the label check in tests and `facefuse video`)."""
    with open_input(path) as container:
        return dict(container.metadata)


def assemble(output: Path, segments: list[tuple[Path, list[int]]], source: Path, info: VideoInfo,
             start_pts: int | None, end_pts: int | None) -> None:
    """Remux the encoded segments and the source's audio packets into ``output`` (via a temporary name).

    Each video packet gets the pts of the input frame it encodes (segments hold no B-frames, so the n-th packet
    is the n-th frame). When the clip is trimmed, video and audio move back by the same time, ``start_pts``.
    """
    fmt = container_format(output)
    temporary = output.with_name(f".{output.name}.partial{output.suffix}")
    shift = Fraction(start_pts or 0) * info.time_base  # seconds removed from the front
    end_time = None if end_pts is None else Fraction(end_pts) * info.time_base
    options = {"movflags": "use_metadata_tags"} if fmt in ("mp4", "mov") else {}
    try:
        with av.open(str(temporary), "w", format=fmt, options=options) as out:
            out.metadata.update(label_metadata())
            with av.open(str(segments[0][0])) as first:
                video = out.add_stream_from_template(first.streams.video[0])
            video.time_base = info.time_base
            if info.rotation:
                video.set_display_rotation(info.rotation)
            with open_input(source) as audio_in:
                audio = {s.index: out.add_stream_from_template(s) for s in audio_in.streams.audio}
                packets = heapq.merge(_video_packets(video, segments, info, start_pts or 0),
                                      _audio_packets(audio_in, audio, shift, end_time), key=lambda item: item[0])
                for _, packet in packets:
                    out.mux(packet)
        os.replace(temporary, output)
    except av.error.FFmpegError as exc:
        raise FacefuseError(ErrorCode.UNSUPPORTED_VIDEO, f"the streams cannot be written as {output.suffix} "
                            f"({_reason(exc)})", "choose another output container, e.g. .mkv") from None
    finally:
        temporary.unlink(missing_ok=True)


def _video_packets(video: av.VideoStream, segments: list[tuple[Path, list[int]]], info: VideoInfo,
                   offset: int) -> Iterator[tuple[Fraction, av.Packet]]:
    extradata = None
    for path, pts_list in segments:
        with av.open(str(path)) as segment:
            stream = segment.streams.video[0]
            if extradata is not None and stream.codec_context.extradata != extradata:
                raise FacefuseError(ErrorCode.INTERNAL, f"segment {path.name} was encoded with other settings",
                                    "delete the work folder and start again")
            extradata = stream.codec_context.extradata
            packets = [p for p in segment.demux(stream) if p.size]
            if len(packets) != len(pts_list):
                raise FacefuseError(ErrorCode.INTERNAL, f"segment {path.name} holds {len(packets)} packets for "
                                    f"{len(pts_list)} frames", "delete the work folder and start again")
            for i, packet in enumerate(packets):
                packet.stream = video
                packet.time_base = info.time_base
                packet.pts = packet.dts = pts_list[i] - offset
                if i + 1 < len(pts_list):
                    packet.duration = pts_list[i + 1] - pts_list[i]
                yield packet.pts * info.time_base, packet


def _audio_packets(container: av.container.InputContainer, streams: dict[int, av.AudioStream], shift: Fraction,
                   end_time: Fraction | None) -> Iterator[tuple[Fraction, av.Packet]]:
    """The audio packets, untouched but for their timestamps when the clip is trimmed."""
    if not streams:
        return
    for packet in container.demux(*(s for s in container.streams.audio if s.index in streams)):
        if packet.dts is None or packet.pts is None:
            continue
        time = packet.pts * packet.time_base
        if (shift and time < shift) or (end_time is not None and time >= end_time):
            continue
        offset = int(shift / packet.time_base)
        packet.pts -= offset
        packet.dts -= offset
        packet.stream = streams[packet.stream.index]
        yield time - shift, packet
