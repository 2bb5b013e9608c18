"""The OpenAPI document the service serves, completed so that a client generator or a contract tester sees the API
the server actually speaks.

FastAPI derives paths and the request models from the routes; what it cannot see is added here: every error status
each operation can answer (statuses from the one table in :mod:`facefuse.errors`, never restated), the error object
with its ``code`` enum, the image content types of ``/v1/fuse``, Prometheus text for ``/metrics``, a ``HEAD``
operation beside every ``GET`` (:class:`.middleware.HeadAsGet` answers them), the bearer API-key scheme where the
server has a key, and the request bodies in both encodings, generated from the same pydantic models the handlers
validate with.
``tests/test_contract.py`` checks the served document against the running server with Schemathesis.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Iterable
from http import HTTPStatus
from typing import Annotated, Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from ..errors import ERROR_TABLE, ErrorCode
from ..imageio import MEDIA_TYPES, OUTPUTS, SUPPORTED_FORMATS
from ..pipeline import MAX_SOURCE_PHOTOS
from ..schema import Scope, fields_of
from ..video.options import VideoOptions
from .settings import ServeSettings

_REF = "#/components/schemas/{model}"
SECURITY_SCHEME = "apiKey"

# -- the answers' shapes ---------------------------------------------------------------------------------------


class ErrorObject(BaseModel):
    """What went wrong (``message``), what to do about it (``hint``), and a stable ``code`` to branch on."""

    code: ErrorCode = Field(description="stable machine-readable code; its HTTP status is fixed by the error table")
    message: str = Field(description="what happened, for a person")
    hint: str = Field(description="what to do about it, for a person")
    details: dict[str, Any] = Field(description="machine-readable particulars, e.g. the offending field or image")


class ErrorResponse(BaseModel):
    """Every answer with a 4xx/5xx status has this body."""

    error: ErrorObject
    request_id: str = Field(description="also in the X-Request-ID header; quote it when reporting a problem")


Box = Annotated[list[float], Field(min_length=4, max_length=4, description="x, y, width, height in pixels")]


class Pose(BaseModel):
    """Head pose in degrees."""

    yaw: float
    pitch: float
    roll: float


class FusedFace(BaseModel):
    """A target face that was replaced."""

    index: int = Field(ge=0, description="the face's index in the target photo, counted left to right from 0")
    box: Box
    score: float = Field(description="detector confidence, 0–1")
    pose: Pose | None
    source_photo: int = Field(ge=0, description="which of the source photos the face was fused from, counted from 0 "
                                                "in the order they were sent (0 when one was sent)")


class QualityIssue(BaseModel):
    """Why the quality gate would refuse a face; ``code`` is the error fusion would answer."""

    code: ErrorCode
    message: str
    hint: str
    details: dict[str, Any]


class FaceQuality(BaseModel):
    accepted: bool
    issues: list[QualityIssue]


class DetectedFace(BaseModel):
    """A face found by ``/v1/detect``."""

    box: Box
    score: float = Field(description="detector confidence, 0–1")
    keypoints: list[list[float]] = Field(description="5 points (x, y): eyes, nose tip, mouth corners, image-left "
                                                     "first")
    pose: Pose | None
    sharpness: float | None = Field(description="variance of the Laplacian on the face; low means blurred")
    quality: FaceQuality


class Verdict(BaseModel):
    """Would fusion accept this photo as it is (its largest face, through the same gate)?"""

    accepted: bool
    code: ErrorCode | None = Field(description="the error fusion would answer; null when accepted")
    message: str
    hint: str


_FORMAT_NAMES = tuple(f.name for f in OUTPUTS)
_MEDIA_TYPES = tuple(f.media_type for f in OUTPUTS)


class FuseAnswer(BaseModel):
    """``POST /v1/fuse`` answered as JSON (when ``Accept`` names no image type)."""

    model_config = ConfigDict(extra="allow")

    image_base64: str = Field(json_schema_extra={"contentEncoding": "base64"},
                              description="the fused image, labelled AI-generated in its metadata")
    format: Literal[_FORMAT_NAMES]  # type: ignore[valid-type]
    media_type: Literal[_MEDIA_TYPES]  # type: ignore[valid-type]
    extension: str = Field(description="the suffix a file of this format takes (the page's download name)")
    faces: list[FusedFace] = Field(description="the target faces that were replaced, left to right")
    timings_ms: dict[str, float] = Field(description="milliseconds per stage, queue wait included")
    warnings: list[str] = Field(description="target faces skipped by the quality gate, and similar notes")
    request_id: str


class DetectAnswer(BaseModel):
    """``POST /v1/detect``: the faces found and whether fusion would accept the photo as it is."""

    model_config = ConfigDict(extra="allow")

    faces: list[DetectedFace] = Field(description="left to right")
    rotation: Literal[0, 90, 180, 270] = Field(description="clockwise turn at which the faces were found")
    image_size: list[int] = Field(min_length=2, max_length=2, description="width, height")
    timings_ms: dict[str, float]
    verdict: Verdict
    request_id: str


class Health(BaseModel):
    status: Literal["ok"]


class QueueState(BaseModel):
    pending: int = Field(ge=0, description="requests waiting for a worker")
    size: int = Field(ge=1, description="requests beyond this many waiting are answered 429")


class Readiness(BaseModel):
    status: Literal["ready"]
    ready_after_s: float = Field(ge=0, description="seconds the models took to load")
    queue: QueueState


class ModelInfo(BaseModel):
    name: str
    task: str
    licence: str
    commercial_use: bool = Field(description="the model's licence permits commercial use (a deployment with "
                                 "allow_noncommercial_models=false uses only these)")
    default: bool = Field(description="pulled by `facefuse models pull --default`")
    cached: bool = Field(description="in this server's model cache")
    description: str


class ModelsAnswer(BaseModel):
    """What this server runs: its detector, engines and ONNX Runtime providers, and every registered model."""

    detector: str
    engine: str = Field(description="the engine a request gets when it names none")
    engines: list[str] = Field(description="the engines a request may name")
    providers: list[str]
    models: list[ModelInfo]


class OptionsAnswer(BaseModel):
    """The request fields of ``POST /v1/fuse`` as JSON Schema, which the web page builds its controls from."""

    json_schema: dict[str, Any] = Field(alias="schema")
    engines: list[str]


class JobProgress(BaseModel):
    percent: float = Field(ge=0, le=100)
    frames_done: int = Field(ge=0, description="photos or video frames finished")
    frames_total: int = Field(ge=0, description="photos in the job, or the video's frames (from its container)")
    fps: float | None = Field(description="photos or frames per second so far")
    eta_s: float | None = Field(description="seconds left, estimated")


class JobItem(BaseModel):
    """One photo of a photo job."""

    index: int = Field(ge=0)
    name: str = Field(description="the upload's or the zip member's name (a label, never a path)")
    state: Literal["pending", "done", "failed"]
    output: str | None = Field(description="its file in the result zip")
    error: ErrorObject | None


class ItemsPage(BaseModel):
    offset: int = Field(ge=0)
    limit: int = Field(ge=1)
    total: int = Field(ge=0, description="items in the job; ask for the next page with ?offset=")


class ItemCounts(BaseModel):
    pending: int = Field(ge=0)
    done: int = Field(ge=0)
    failed: int = Field(ge=0)


class JobAnswer(BaseModel):
    """A batch job: its state, progress, one page of its items (``?offset=&limit=``), the counts of all of them,
    and the first failed ones."""

    id: str
    kind: Literal["photos", "video"]
    state: Literal["queued", "running", "done", "failed", "cancelled", "expired"]
    created_at: float
    started_at: float | None
    finished_at: float | None
    expires_at: float | None = Field(description="when its files are deleted (set once it is finished)")
    progress: JobProgress
    items: list[JobItem] = Field(description="the page of items asked for (photo jobs; empty for a video)")
    items_page: ItemsPage
    summary: ItemCounts
    errors: list[JobItem] = Field(description="failed items, at most `limit` of them, in order")
    error: ErrorObject | None = Field(description="why the whole job failed")
    warnings: list[str]
    options: dict[str, Any]
    result_url: str | None = Field(description="where to download the result, once the job is done")


class JobDeleted(BaseModel):
    """``DELETE /v1/jobs/{id}``: the job was cancelled if it was still queued or running, and it and its files
    are gone; ``GET`` on it answers 404 from now on."""

    id: str
    state: Literal["deleted"]
    was: Literal["queued", "running", "done", "failed", "cancelled", "expired"]
    deleted_at: float


# -- which operation can answer what ---------------------------------------------------------------------------

_UPLOAD = (ErrorCode.BAD_REQUEST, ErrorCode.INVALID_OPTION, ErrorCode.UPLOAD_TIMEOUT, ErrorCode.IMAGE_TOO_LARGE,
           ErrorCode.IMAGE_TOO_SMALL, ErrorCode.UNSUPPORTED_IMAGE, ErrorCode.CORRUPT_IMAGE)
_QUEUED_WORK = (ErrorCode.NOT_READY, ErrorCode.QUEUE_FULL, ErrorCode.DEADLINE_EXCEEDED, ErrorCode.MODEL_MISSING,
                ErrorCode.MODEL_CORRUPT, ErrorCode.MODEL_MISMATCH)
_FACES = (ErrorCode.NO_FACE, ErrorCode.FACE_TOO_SMALL, ErrorCode.POSE_TOO_LARGE, ErrorCode.LOW_CONFIDENCE,
          ErrorCode.TOO_BLURRY, ErrorCode.FACE_INDEX_OUT_OF_RANGE)

# Error codes each operation can answer besides INTERNAL (any operation), UNAUTHORIZED (the key-protected routes,
# when the server has a key) and BAD_REQUEST (any operation: a missing, repeated or refused Host header).
# A route missing here stops the document from being built, so a new route cannot go out undocumented.
OPERATION_ERRORS: dict[tuple[str, str], tuple[ErrorCode, ...]] = {
    ("post", "/v1/fuse"): _UPLOAD + _FACES + _QUEUED_WORK,
    ("post", "/v1/detect"): _UPLOAD + _QUEUED_WORK,
    ("get", "/v1/models"): (ErrorCode.NOT_READY,),
    ("get", "/v1/options"): (),
    ("get", "/healthz"): (),
    ("get", "/readyz"): (ErrorCode.NOT_READY,),
    ("get", "/metrics"): (),
    ("post", "/v1/jobs"): _UPLOAD + (ErrorCode.UNSUPPORTED_VIDEO, ErrorCode.CORRUPT_VIDEO, ErrorCode.JOB_TOO_LARGE,
                                     ErrorCode.BAD_ARCHIVE, ErrorCode.STORAGE_FULL, ErrorCode.NOT_READY,
                                     ErrorCode.QUEUE_FULL),
    ("get", "/v1/jobs/{job_id}"): (ErrorCode.NOT_FOUND, ErrorCode.JOB_EXPIRED),
    ("get", "/v1/jobs/{job_id}/result"): (ErrorCode.NOT_FOUND, ErrorCode.JOB_NOT_DONE, ErrorCode.JOB_EXPIRED),
    ("delete", "/v1/jobs/{job_id}"): (ErrorCode.NOT_FOUND,),
}

_IMAGE_TYPES = sorted(MEDIA_TYPES.values())
_INPUT_FORMATS = ", ".join(sorted(SUPPORTED_FORMATS))
_REQUEST_ID = {"description": "the request id (yours, if you sent a valid X-Request-ID)", "required": True,
               "schema": {"type": "string"}}
_STATUS_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "the scheme to authenticate with", "required": True,
                               "schema": {"type": "string", "const": "Bearer"}}},
    429: {"Retry-After": {"description": "seconds to wait before trying again", "required": True,
                          "schema": {"type": "string", "pattern": "^[0-9]+$"}}},
}


def error_responses(codes: Iterable[ErrorCode]) -> dict[str, Any]:
    """One response per status the codes map to, each listing its codes and carrying the error object."""
    by_status: dict[int, list[ErrorCode]] = defaultdict(list)
    for code in codes:
        by_status[ERROR_TABLE[code].http_status].append(code)
    responses: dict[str, Any] = {}
    for status in sorted(by_status):
        names = [code.value for code in by_status[status]]
        example = {"error": {"code": names[0], "message": "what happened", "hint": "what to do", "details": {}},
                   "request_id": "0f3c2a9b1d4e5f60"}
        responses[str(status)] = {
            "description": f"{HTTPStatus(status).phrase}: {', '.join(names)}",
            "headers": {"X-Request-ID": _REQUEST_ID, **_STATUS_HEADERS.get(status, {})},
            "content": {"application/json": {"schema": {"$ref": _REF.format(model="ErrorResponse")},
                                             "example": example}},
        }
    return responses


# -- request bodies --------------------------------------------------------------------------------------------


def without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A form field is either absent or text: drop the ``null`` branch pydantic gives optional fields."""
    options = schema.get("anyOf")
    if not options:
        return schema
    kept = [option for option in options if option.get("type") != "null"]
    rest = {key: value for key, value in schema.items()
            if key != "anyOf" and not (key == "default" and value is None)}
    return {**rest, **kept[0]} if len(kept) == 1 else {**rest, "anyOf": kept}


def _const_as_enum(schema: Any) -> Any:
    """``const: x`` written as the equivalent ``enum: [x]`` (pydantic's form of a one-value Literal): client
    generators handle enums everywhere, while openapi-python-client 0.29 turns a ``const`` inside ``anyOf`` into an
    ``isinstance`` check on ``Literal[...]`` that fails at run time."""
    if isinstance(schema, list):
        return [_const_as_enum(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {key: _const_as_enum(value) for key, value in schema.items() if key != "const"}
    if "const" in schema:
        converted["enum"] = [schema["const"]]
    return converted


def request_body(title: str, files: dict[str, str], json_model: type[BaseModel],
                 form_model: type[BaseModel], repeatable: dict[str, int] | None = None) -> dict[str, Any]:
    """``openapi_extra`` of a route that takes photos: a required body in both encodings the handler parses.

    Both schemas are the pydantic models' own (the models the handler validates with); only the photo fields differ
    by encoding: file parts in multipart/form-data, base64 strings in JSON. They become the components
    ``<title>Form`` and ``<title>JSON`` (the class names of a generated client). A ``repeatable`` photo field (name:
    most photos) is an array of files in the form and a string or an array of strings in JSON.
    """
    about = f"({_INPUT_FORMATS}; the bytes are sniffed, a declared type is ignored)"
    repeatable = repeatable or {}
    form = form_model.model_json_schema()

    def file_part(name: str, text: str) -> dict[str, Any]:
        part = {"type": "string", "format": "binary", "description": f"{text} {about}"}
        if name not in repeatable:
            return part
        return {"type": "array", "items": part, "minItems": 1, "maxItems": repeatable[name],
                "description": f"{text} {about}; repeat the field for up to {repeatable[name]}"}

    def base64_string(name: str, text: str) -> dict[str, Any]:
        string = {"type": "string", "format": "byte", "contentEncoding": "base64", "minLength": 1,
                  "description": f"{text} {about}, base64-encoded (a data: URL prefix is allowed)"}
        if name not in repeatable:
            return {**json_model.model_json_schema()["properties"][name], **string}
        return {"anyOf": [string, {"type": "array", "items": string, "minItems": 1, "maxItems": repeatable[name]}],
                "description": f"{string['description']}; or a list of up to {repeatable[name]}"}

    file_parts = {name: file_part(name, text) for name, text in files.items()}
    text_parts = {name: without_null(value) for name, value in form["properties"].items() if name not in files}
    form = {**form, "title": f"{title}Form", "properties": {**file_parts, **text_parts},
            "required": list(dict.fromkeys([*files, *form.get("required", [])]))}
    data = {**json_model.model_json_schema(), "title": f"{title}JSON"}
    data["properties"] = {**data["properties"], **{name: base64_string(name, text) for name, text in files.items()}}
    return {"requestBody": {"required": True, "content": {
        "multipart/form-data": {"schema": _const_as_enum(form)},
        "application/json": {"schema": _const_as_enum(data)},
    }}}


FUSE_PHOTOS = {"source": "identity photo", "target": "pose/scene photo"}


def fuse_request_body(models: tuple[type[BaseModel], type[BaseModel]]) -> dict[str, Any]:
    """The request body of ``POST /v1/fuse`` for (form, JSON) request models: the library's on the route, each
    app's own (its defaults and engines) in the document it serves."""
    form, json_model = models
    return request_body("Fuse", FUSE_PHOTOS, json_model, form, {"source": MAX_SOURCE_PHOTOS})


VIDEO_FIELDS = tuple(fields_of(VideoOptions, Scope.REQUEST))  # the fields of `facefuse video` a job may set


def job_request_body(form_model: type[BaseModel], max_items: int) -> dict[str, Any]:
    """The multipart body of ``POST /v1/jobs``: the two file fields, ``form_model``'s option fields (those of
    ``/v1/fuse``) and the video fields; nothing else is accepted (an unknown field is a 400)."""
    options = form_model.model_json_schema()
    video = {name: schema for name, schema in VideoOptions.model_json_schema()["properties"].items()
             if name in VIDEO_FIELDS}
    binary = {"type": "string", "format": "binary"}
    schema = {"type": "object", "required": ["source", "targets"], "additionalProperties": False, "properties": {
        "source": {"type": "array", "items": binary, "minItems": 1, "maxItems": MAX_SOURCE_PHOTOS,
                   "description": "the photo whose face is used; repeat the field for up to "
                                  f"{MAX_SOURCE_PHOTOS} photos of the same person (each face is fused from the one "
                                  "turned most like it)"},
        "targets": {"type": "array", "items": binary, "minItems": 1, "maxItems": max_items,
                    "description": "photos, zips of photos, or exactly one video (repeat the field); "
                                   f"at most {max_items} photos in all, zip members included"},
        **{name: without_null(value) for name, value in options.get("properties", {}).items()},
        **{name: without_null(value) for name, value in video.items()}}}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}}


# -- the document ----------------------------------------------------------------------------------------------


# JSON answers with status 200, by path (/v1/fuse and /metrics are described in _ok)
_OK_MODELS: dict[str, type[BaseModel]] = {"/v1/detect": DetectAnswer, "/v1/models": ModelsAnswer,
                                          "/v1/options": OptionsAnswer, "/healthz": Health, "/readyz": Readiness}


# the jobs' JSON answers, by operation: (status, model)
_JOB_ANSWERS: dict[tuple[str, str], tuple[str, type[BaseModel]]] = {
    ("post", "/v1/jobs"): ("202", JobAnswer), ("get", "/v1/jobs/{job_id}"): ("200", JobAnswer),
    ("delete", "/v1/jobs/{job_id}"): ("200", JobDeleted)}


def _ok(operation: dict[str, Any], method: str, path: str) -> None:
    if (method, path) in _JOB_ANSWERS:
        status, model = _JOB_ANSWERS[(method, path)]
        answer = operation["responses"][status]
        answer.setdefault("headers", {})["X-Request-ID"] = _REQUEST_ID
        answer["content"] = {"application/json": {"schema": {"$ref": _REF.format(model=model.__name__)}}}
        if status == "202":
            operation["responses"].pop("200", None)
            answer["headers"]["Location"] = {"description": "the job's URL", "required": True,
                                             "schema": {"type": "string"}}
        return
    ok = operation["responses"].setdefault("200", {"description": "OK"})
    ok.setdefault("headers", {})["X-Request-ID"] = _REQUEST_ID
    if path in _OK_MODELS:
        ok["content"] = {"application/json": {"schema": {"$ref": _REF.format(model=_OK_MODELS[path].__name__)}}}
    elif path == "/metrics":
        ok["content"] = {"text/plain": {"schema": {"type": "string"},
                                        "example": "# TYPE facefuse_ready gauge\nfacefuse_ready 1.0\n"}}
    elif path == "/v1/fuse":
        ok["description"] = ("the fused image: its bytes when Accept names an image type (or output_format with "
                             "Accept: image/*), else JSON with the image in base64, the faces and the timings")
        ok["headers"]["Server-Timing"] = {"description": "milliseconds per stage", "schema": {"type": "string"}}
        ok["content"] = {"application/json": {"schema": {"$ref": _REF.format(model="FuseAnswer")}},
                         **{media: {"schema": {"type": "string", "format": "binary"}} for media in _IMAGE_TYPES}}


def _head_of(operation: dict[str, Any]) -> dict[str, Any]:
    """The HEAD twin of a GET operation: same statuses and headers, no bodies."""
    head = copy.deepcopy(operation)
    head["operationId"] = f"{operation['operationId']}_head"
    head["summary"] = f"{operation.get('summary', '')} (headers only)".strip()
    for response in head["responses"].values():
        response.pop("content", None)
    return head


def _hoist_request_bodies(schema: dict[str, Any]) -> None:
    """Request-body schemas become named components, so clients get classes named after them."""
    components = schema["components"]["schemas"]
    for item in schema["paths"].values():
        for operation in item.values():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                body = media["schema"]
                if "title" in body and "$ref" not in body:
                    components[body["title"]] = body
                    media["schema"] = {"$ref": _REF.format(model=body["title"])}


def build_openapi(app: FastAPI, settings: ServeSettings, fuse_models: tuple[type[BaseModel], type[BaseModel]],
                  keyed_paths: set[str]) -> dict[str, Any]:
    """FastAPI's document for ``app``, completed (see the module docstring).

    ``fuse_models`` are the app's request models of ``/v1/fuse`` (its option defaults and the engines it loaded, so
    the document offers exactly what this server accepts); ``keyed_paths`` the paths that need the API key.
    """
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schema["paths"]["/v1/fuse"]["post"].update(fuse_request_body(fuse_models))
    schema["paths"]["/v1/jobs"]["post"].update(job_request_body(fuse_models[0], settings.job_max_items))
    components = schema.setdefault("components", {})
    answers = (ErrorResponse, FuseAnswer, *_OK_MODELS.values(), JobAnswer, JobDeleted)
    _, definitions = models_json_schema([(model, "serialization") for model in answers], ref_template=_REF)
    components.setdefault("schemas", {}).update(definitions["$defs"])
    if settings.api_key is not None:
        components["securitySchemes"] = {SECURITY_SCHEME: {
            "type": "http", "scheme": "bearer", "description": "the API key the operator gave you"}}
    for path, item in schema["paths"].items():
        for method in list(item):
            if (method, path) not in OPERATION_ERRORS:
                raise RuntimeError(f"{method.upper()} {path} has no entry in serve.openapi.OPERATION_ERRORS")
            operation = item[method]
            codes = [*OPERATION_ERRORS[(method, path)], ErrorCode.INTERNAL]
            if ErrorCode.BAD_REQUEST not in codes:
                codes.append(ErrorCode.BAD_REQUEST)  # middleware.HostCheck: no single valid Host, or not one served
            if settings.api_key is not None and path in keyed_paths:
                codes.append(ErrorCode.UNAUTHORIZED)
                operation["security"] = [{SECURITY_SCHEME: []}]
            _ok(operation, method, path)
            operation["responses"].update(error_responses(codes))
        if "get" in item:
            item["head"] = _head_of(item["get"])
    _hoist_request_bodies(schema)
    return schema


def install_openapi(app: FastAPI, settings: ServeSettings, fuse_models: tuple[type[BaseModel], type[BaseModel]],
                    keyed_paths: set[str]) -> None:
    """Serve :func:`build_openapi`'s document at ``/openapi.json`` (built once, on first request)."""
    built: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        if not built:
            built.append(build_openapi(app, settings, fuse_models, keyed_paths))
        return built[0]

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to replace the document

