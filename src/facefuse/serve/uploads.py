"""Reading request bodies safely: a byte limit enforced while the body streams in, multipart parsed in memory,
base64 JSON decoded strictly, and options validated once into the library's own option objects.

Why not Starlette's form parser: it spools file parts over 1 MB to a temporary file, and uploads must never touch
the disk. python-multipart (the parser Starlette itself uses) is driven directly here with in-memory callbacks.
Image bytes are never trusted by their declared content type: :func:`facefuse.imageio.decode_image` sniffs them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from copy import copy
from dataclasses import dataclass, field
from typing import Any, Literal

from prometheus_client import Counter
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from python_multipart import MultipartParser
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import parse_options_header
from starlette.requests import Request

from ..errors import ErrorCode, FacefuseError
from ..fusion.engine import FusionOptions
from ..pipeline import MAX_SOURCE_PHOTOS, EncodeOptions, check_source_count
from ..schema import Scope, fields_of, invalid_options

# every field a fusion request may carry (the source photos, the target, each option, the encoding), so a full form
# always fits
_MAX_PARTS = MAX_SOURCE_PHOTOS + 1 + len(FusionOptions.model_fields) + len(EncodeOptions.model_fields)
_MAX_TEXT_FIELD = 4096
_MAX_BOUNDARY = 256  # RFC 2046 allows 70; longer ones are accepted up to what python-multipart can parse


def _body_too_large(size: int, limit: int) -> FacefuseError:
    return FacefuseError(ErrorCode.IMAGE_TOO_LARGE, f"the request body is over {limit / 2**20:g} MiB",
                         "send smaller or more compressed photos", {"bytes_read": size, "max_body_bytes": limit})


@dataclass(frozen=True)
class UploadLimits:
    """How request bodies must arrive: whole within ``timeout_s``, no pause longer than ``idle_s`` between two
    pieces, and (once ``idle_s`` has passed) at ``min_rate`` bytes per second on average."""

    timeout_s: float
    idle_s: float
    min_rate: float


class UploadGate:
    """What request bodies may hold at once: how many are being received (in all, and from one client address),
    and how many bytes all requests in progress keep in memory (a body stays buffered until its request is
    answered).

    Why: without it, ten stalled 30 MB uploads held 300 MB; the per-request limit alone does not bound the sum.
    A request over either budget gets 429 at once. A declared ``Content-Length`` is reserved whole when the body
    starts, so ten 29 MB uploads against 256 MiB admit eight and refuse two, instead of all ten running into the
    budget half-way. Holding an upload slot costs bandwidth (:class:`UploadLimits`): sixteen connections sending
    one byte every few seconds are dropped with 408 within ``idle_s``, and one address holds at most
    ``max_per_client`` slots. Used only on the event loop, so plain counters suffice.
    """

    def __init__(self, max_uploads: int, max_per_client: int, max_bytes: int, limits: UploadLimits,
                 rejected: Counter) -> None:
        self.max_uploads = max_uploads
        self.max_per_client = max_per_client
        self.max_bytes = max_bytes
        self.limits = limits
        self.rejected = rejected
        self.receiving = 0
        self.held = 0
        self._by_client: dict[str, int] = {}

    def _busy(self, what: str) -> FacefuseError:
        self.rejected.inc()
        return FacefuseError(ErrorCode.QUEUE_FULL, f"the server is receiving too many uploads ({what})",
                             "retry in a few seconds", {"retry_after_s": 2})

    def _too_slow(self, message: str, size: int) -> FacefuseError:
        return FacefuseError(ErrorCode.UPLOAD_TIMEOUT, message, "check the connection, or send smaller photos",
                             {"bytes_read": size, "upload_timeout_s": self.limits.timeout_s,
                              "upload_idle_s": self.limits.idle_s, "upload_min_bytes_per_s": self.limits.min_rate})

    def _admit(self, client: str, declared: int) -> None:
        if self.receiving >= self.max_uploads:
            raise self._busy(f"{self.receiving} at once")
        if self._by_client.get(client, 0) >= self.max_per_client:
            raise self._busy(f"{self.max_per_client} from your address at once")
        if self.held + declared > self.max_bytes:
            raise self._busy(f"{self.held / 2**20:.0f} MiB buffered")

    async def _receive(self, request: Request, limit: int, held: list[int]) -> list[bytes]:
        """The body's chunks; raises 413 past ``limit``, 408 on a long pause, a low rate or the overall timeout,
        429 when the buffered-bytes budget is used up. ``held[0]`` is what this request has added to
        ``self.held`` (its declared length, reserved already, and what arrives beyond it)."""
        chunks: list[bytes] = []
        size = 0
        started = time.monotonic()
        stream = request.stream().__aiter__()
        while True:
            left = max(0.0, self.limits.timeout_s - (time.monotonic() - started))
            try:
                chunk = await asyncio.wait_for(stream.__anext__(), min(self.limits.idle_s, left))
            except StopAsyncIteration:
                return chunks
            except asyncio.TimeoutError:  # the stream was cancelled with the wait: this body ends here either way
                if self.limits.idle_s < left:
                    raise self._too_slow(f"the request body paused for more than {self.limits.idle_s:g} s",
                                         size) from None
                raise self._too_slow(f"the request body did not arrive within {self.limits.timeout_s:g} s",
                                     size) from None
            size += len(chunk)
            if size > limit:
                raise _body_too_large(size, limit)
            if size > held[0]:
                if self.held + size - held[0] > self.max_bytes:
                    raise self._busy(f"{self.held / 2**20:.0f} MiB buffered")
                self.held += size - held[0]
                held[0] = size
            chunks.append(chunk)
            elapsed = time.monotonic() - started
            if elapsed > self.limits.idle_s and size < self.limits.min_rate * elapsed:
                raise self._too_slow(f"the request body arrives at {size / elapsed:.0f} bytes/s, less than the "
                                     f"{self.limits.min_rate:.0f} the server requires", size)

    @asynccontextmanager
    async def body(self, request: Request, limit: int) -> AsyncIterator[bytes]:
        """The whole body, held for the ``with`` block: 413 as soon as the declared or received size passes
        ``limit``, 408 when it arrives too slowly (:class:`UploadLimits`), 429 when a budget is used up."""
        header = request.headers.get("content-length")
        declared = 0
        if header is not None:
            if not header.isdigit():
                raise FacefuseError(ErrorCode.BAD_REQUEST, "the Content-Length header is not a number",
                                    "let your HTTP client set it")
            declared = int(header)
            if declared > limit:
                raise _body_too_large(declared, limit)
        client = request.client.host if request.client else ""
        self._admit(client, declared)
        self.receiving += 1
        self._by_client[client] = self._by_client.get(client, 0) + 1
        held = [declared]
        self.held += declared
        try:
            chunks = await self._receive(request, limit, held)
        except BaseException:
            self.held -= held[0]
            raise
        finally:
            self.receiving -= 1
            self._by_client[client] -= 1
            if not self._by_client[client]:
                del self._by_client[client]
        try:
            yield b"".join(chunks)
        finally:
            self.held -= held[0]


@dataclass
class _Part:
    headers: dict[str, bytes] = field(default_factory=dict)
    data: bytearray = field(default_factory=bytearray)

    @property
    def name(self) -> str:
        _, params = parse_options_header(self.headers.get("content-disposition", b""))
        return params.get(b"name", b"").decode("utf-8", "replace")

    @property
    def filename(self) -> str:
        _, params = parse_options_header(self.headers.get("content-disposition", b""))
        return params.get(b"filename", b"").decode("utf-8", "replace")


def multipart_parts(body: bytes, content_type: str, max_parts: int = _MAX_PARTS) -> list[_Part]:
    """Every part of a multipart/form-data body in order, all in memory (a field may repeat)."""
    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if not boundary:
        raise FacefuseError(ErrorCode.BAD_REQUEST, "the multipart body has no boundary",
                            "let your HTTP client build the multipart request")
    parts: list[_Part] = []
    header: list[bytes] = [b"", b""]
    finished: list[bool] = []

    def on_part_begin() -> None:
        if len(parts) >= max_parts:
            raise FacefuseError(ErrorCode.BAD_REQUEST, f"more than {max_parts} form fields",
                                "send only the documented fields")
        parts.append(_Part())

    def on_header_end() -> None:
        parts[-1].headers[header[0].decode("latin-1").lower()] = header[1]
        header[0], header[1] = b"", b""

    callbacks: Any = {
        "on_part_begin": on_part_begin,
        "on_part_data": lambda data, start, end: parts[-1].data.extend(data[start:end]),
        "on_header_field": lambda data, start, end: header.__setitem__(0, header[0] + data[start:end]),
        "on_header_value": lambda data, start, end: header.__setitem__(1, header[1] + data[start:end]),
        "on_header_end": on_header_end,
        "on_end": lambda: finished.append(True),
    }
    if len(boundary) > _MAX_BOUNDARY:
        raise FacefuseError(ErrorCode.BAD_REQUEST, f"the multipart boundary is {len(boundary)} characters long, "
                            f"more than {_MAX_BOUNDARY}", "let your HTTP client build the multipart request",
                            {"boundary_length": len(boundary)})
    try:
        parser = MultipartParser(boundary, callbacks)
        parser.write(body)
        parser.finalize()
    except FormParserError as exc:  # MultipartParseError included
        raise FacefuseError(ErrorCode.BAD_REQUEST, f"the multipart body is malformed ({exc})",
                            "let your HTTP client build the multipart request") from None
    if not finished:
        raise FacefuseError(ErrorCode.BAD_REQUEST, "the multipart body ended before its closing boundary",
                            "the upload was cut off: send it again")
    return parts


def unique_fields(parts: list[_Part]) -> dict[str, bytes]:
    """Parts by field name, refusing a field sent twice."""
    fields: dict[str, bytes] = {}
    for part in parts:
        if part.name in fields:
            raise FacefuseError(ErrorCode.BAD_REQUEST, f"the field '{part.name}' was sent twice",
                                "send each field once", {"field": part.name})
        fields[part.name] = bytes(part.data)
    return fields


def parse_multipart(body: bytes, content_type: str) -> dict[str, bytes]:
    """Parts of a multipart/form-data body by field name, all in memory."""
    return unique_fields(multipart_parts(body, content_type))


def decode_base64(value: str, name: str) -> bytes:
    """Strict base64 (a ``data:`` URL prefix is allowed, as browsers produce them)."""
    if value.startswith("data:") and "," in value:
        value = value.split(",", 1)[1]
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise FacefuseError(ErrorCode.BAD_REQUEST, f"'{name}' is not valid base64",
                            "send the image file's bytes encoded as standard base64", {"field": name}) from None


class _RequestModel(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


def fuse_request_models(defaults: FusionOptions | None = None,
                        engines: Sequence[str] | None = None) -> tuple[type[BaseModel], type[BaseModel]]:
    """The fields of ``POST /v1/fuse`` as (form model, JSON model), derived from the request-scope fields of
    :class:`~facefuse.fusion.engine.FusionOptions` and the fields of :class:`~facefuse.pipeline.EncodeOptions`.

    ``defaults`` are the server's (its engine and operator-scope options); ``engines`` limits ``engine`` to the ones
    the operator loaded, so naming any other is a 400 before any work is queued. The JSON model adds the two photos
    as base64 strings; the form model is what multipart text fields are checked against (the photos are file parts).
    """
    defaults = defaults or FusionOptions()
    fields: dict[str, Any] = {}
    for name, info in fields_of(FusionOptions, Scope.REQUEST).items():
        field = copy(info)
        field.default = getattr(defaults, name)
        allowed = engines if name == "engine" else None
        annotation = Literal[tuple(allowed)] if allowed else info.annotation
        fields[name] = (annotation, field)
    fields.update({name: (info.annotation, info) for name, info in fields_of(EncodeOptions).items()})
    form = create_model("FuseOptionsIn", __base__=_RequestModel, __module__=__name__, **fields,
                        __doc__="Options of ``POST /v1/fuse``, the same in a form and in JSON.")
    json_model = create_model(
        "FuseJSON", __base__=form, __module__=__name__,
        source=(str | list[str], Field(description=f"source photo (identity), base64 or a data: URL; or a list of "
                                                   f"up to {MAX_SOURCE_PHOTOS} photos of the same person (each "
                                                   "face is fused from the one turned most like it)")),
        target=(str, Field(description="target photo (pose, expression, scene), base64 or a data: URL")))
    return form, json_model


# With the library's defaults and any engine name: what the module-level OpenAPI of the routes shows and what a
# client generator can import; each app builds its own pair from its settings (ServiceState.fuse_models).
FuseOptionsIn, FuseJSON = fuse_request_models()


def fusion_request(given: BaseModel, defaults: FusionOptions) -> tuple[FusionOptions, EncodeOptions]:
    """Split a validated request into the fusion options (the server's defaults updated with the request's fields)
    and the encoding; both were checked by the request model, so nothing is validated a second time."""
    values = given.model_dump()
    options = defaults.model_copy(update={name: values[name] for name in fields_of(FusionOptions, Scope.REQUEST)})
    encoding = EncodeOptions.model_construct(**{name: values[name] for name in fields_of(EncodeOptions)})
    return options, encoding


class DetectJSON(BaseModel):
    model_config = ConfigDict(extra="forbid")

    image: str = Field(description="the photo, base64 or a data: URL")
    role: Literal["source", "target", "image"] = Field("image", description="names the photo in messages")


@dataclass(frozen=True)
class FuseInput:
    sources: tuple[bytes, ...]  # one photo, or several of the same person
    target: bytes
    options: FusionOptions
    encoding: EncodeOptions


@dataclass(frozen=True)
class DetectInput:
    image: bytes
    role: str


def _json_number(text: str) -> float | int:
    """A JSON number with no fraction is an integer (as JSON Schema has it: 53.0 is a valid ``integer``), so the
    strict validation of JSON bodies takes ``"quality": 53.0`` while still refusing ``"quality": "53"``."""
    value = float(text)
    return int(value) if value.is_integer() else value


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body, parse_float=_json_number)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FacefuseError(ErrorCode.BAD_REQUEST, f"the body is not valid JSON ({exc})",
                            "send JSON, or multipart/form-data with files") from None
    except (ValueError, RecursionError):  # an integer over Python's 4300 digits, or nesting deeper than the stack
        raise FacefuseError(ErrorCode.BAD_REQUEST, "the JSON body has a number too long or nesting too deep",
                            "send the documented fields: numbers of a few digits, no nested objects") from None
    if not isinstance(value, dict):
        raise FacefuseError(ErrorCode.BAD_REQUEST, "the JSON body must be an object", "see /docs for the fields")
    return value


def _text_fields(fields: dict[str, bytes], files: tuple[str, ...]) -> dict[str, str]:
    texts: dict[str, str] = {}
    for name, data in fields.items():
        if name in files:
            continue
        if len(data) > _MAX_TEXT_FIELD:
            raise FacefuseError(ErrorCode.INVALID_OPTION, f"the field '{name}' is too long", "see /docs",
                                {"field": name})
        texts[name] = data.decode("utf-8", "replace")
    return texts


def form_values(model: type[BaseModel], texts: dict[str, str]) -> dict[str, Any]:
    """Form text as the model's input, with booleans written ``true`` or ``false`` only (what the OpenAPI document,
    the web page and curl users write); pydantic alone would also read ``0``, ``off``, ``yes``… as booleans."""
    values: dict[str, Any] = dict(texts)
    for name, text in texts.items():
        info = model.model_fields.get(name)
        if info is not None and info.annotation is bool:
            if text.strip().lower() not in ("true", "false"):
                raise FacefuseError(ErrorCode.INVALID_OPTION, f"invalid {name} (got {text[:40]!r}): true or false",
                                    f"{name}: {info.description}", {"option": name})
            values[name] = text.strip().lower() == "true"
    return values


def _missing_file(name: str) -> FacefuseError:
    return FacefuseError(ErrorCode.BAD_REQUEST, f"the '{name}' photo is missing",
                         f"send it as a file field named '{name}'", {"field": name})


def _require_files(fields: dict[str, bytes], names: tuple[str, ...]) -> None:
    for name in names:
        if name not in fields:
            raise _missing_file(name)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def _unsupported_body(media_type: str) -> FacefuseError:
    if not media_type:
        return FacefuseError(ErrorCode.BAD_REQUEST, "the request has no body or no Content-Type",
                             "send multipart/form-data with the photos, or JSON with base64 images")
    return FacefuseError(ErrorCode.UNSUPPORTED_IMAGE, f"cannot read a '{media_type}' body",
                         "send multipart/form-data or application/json", {"content_type": media_type})


def parse_fuse(request: Request, body: bytes, models: tuple[type[BaseModel], type[BaseModel]],
               defaults: FusionOptions) -> FuseInput:
    """``models`` are the app's (form, JSON) request models, ``defaults`` its fusion defaults."""
    form_model, json_model = models
    media_type = _media_type(request)
    try:
        if media_type == "multipart/form-data":
            parts = multipart_parts(body, request.headers["content-type"])
            sources = tuple(bytes(part.data) for part in parts if part.name == "source")  # the field may repeat
            fields = unique_fields([part for part in parts if part.name != "source"])
            if not sources:
                raise _missing_file("source")
            _require_files(fields, ("target",))
            check_source_count(len(sources))
            given = form_model.model_validate(form_values(form_model, _text_fields(fields, ("target",))))
            target = fields["target"]
        elif media_type == "application/json":  # strict: JSON has types, so "true" for a boolean is refused
            given = json_model.model_validate(_json_object(body), strict=True)
            named = given.source  # type: ignore[attr-defined]
            listed = [named] if isinstance(named, str) else named
            check_source_count(len(listed))
            sources = tuple(decode_base64(value, "source") for value in listed)
            target = decode_base64(given.target, "target")  # type: ignore[attr-defined]
        else:
            raise _unsupported_body(media_type)
    except ValidationError as exc:
        raise invalid_options(exc, json_model) from None
    return FuseInput(sources, target, *fusion_request(given, defaults))


def parse_detect(request: Request, body: bytes) -> DetectInput:
    media_type = _media_type(request)
    try:
        if media_type == "multipart/form-data":
            fields = parse_multipart(body, request.headers["content-type"])
            _require_files(fields, ("image",))
            texts = _text_fields(fields, ("image",))
            data = DetectJSON.model_validate({"image": "", **texts})
            return DetectInput(fields["image"], data.role)
        if media_type == "application/json":
            data = DetectJSON.model_validate(_json_object(body), strict=True)
            return DetectInput(decode_base64(data.image, "image"), data.role)
    except ValidationError as exc:
        raise invalid_options(exc, DetectJSON) from None
    raise _unsupported_body(media_type)
