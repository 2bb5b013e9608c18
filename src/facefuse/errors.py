"""One error type with stable codes, and the one table of every attribute of each code: CLI exit code, HTTP status,
whether a retry may succeed, whether its message stays on the server, whether the connection is closed.

Callers (apps, the CLI, the web page) branch on ``code``, never on message text, so codes never change meaning.
The CLI and the HTTP service only translate through :data:`ERROR_TABLE`; neither keeps a mapping of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class ErrorCode(str, Enum):
    """Stable machine-readable error codes."""

    # usage / request shape
    BAD_REQUEST = "BAD_REQUEST"
    INVALID_OPTION = "INVALID_OPTION"
    UNAUTHORIZED = "UNAUTHORIZED"
    NOT_FOUND = "NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    # input images
    IMAGE_TOO_LARGE = "IMAGE_TOO_LARGE"
    IMAGE_TOO_SMALL = "IMAGE_TOO_SMALL"
    UNSUPPORTED_IMAGE = "UNSUPPORTED_IMAGE"
    CORRUPT_IMAGE = "CORRUPT_IMAGE"
    # input videos
    UNSUPPORTED_VIDEO = "UNSUPPORTED_VIDEO"
    CORRUPT_VIDEO = "CORRUPT_VIDEO"
    # faces and quality
    NO_FACE = "NO_FACE"
    FACE_TOO_SMALL = "FACE_TOO_SMALL"
    POSE_TOO_LARGE = "POSE_TOO_LARGE"
    LOW_CONFIDENCE = "LOW_CONFIDENCE"
    TOO_BLURRY = "TOO_BLURRY"
    FACE_INDEX_OUT_OF_RANGE = "FACE_INDEX_OUT_OF_RANGE"
    # models
    MODEL_MISSING = "MODEL_MISSING"
    MODEL_CORRUPT = "MODEL_CORRUPT"
    MODEL_MISMATCH = "MODEL_MISMATCH"
    # service
    QUEUE_FULL = "QUEUE_FULL"
    UPLOAD_TIMEOUT = "UPLOAD_TIMEOUT"
    NOT_READY = "NOT_READY"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    CANCELLED = "CANCELLED"
    INTERNAL = "INTERNAL"
    # batch jobs
    JOB_NOT_DONE = "JOB_NOT_DONE"
    JOB_EXPIRED = "JOB_EXPIRED"
    JOB_TOO_LARGE = "JOB_TOO_LARGE"
    BAD_ARCHIVE = "BAD_ARCHIVE"
    STORAGE_FULL = "STORAGE_FULL"


@dataclass(frozen=True)
class ErrorKind:
    """Every attribute of an error code, the one place each is stated (the CLI, the HTTP service, OpenAPI and the
    clients read them from here).

    ``retryable``: the same request may succeed later unchanged (busy, loading, slow upload, disk full).
    ``server_side``: the message may carry server paths or tool output, so clients get the code and a generic
    message while the log keeps the rest. ``closes_connection``: answered before (or while refusing) the body,
    so the connection is closed rather than the rest of the upload read and thrown away.
    """

    exit_code: int
    http_status: int
    retryable: bool = False
    server_side: bool = False
    closes_connection: bool = False


# exit codes: 0 ok, 2 usage, 3 input rejected, 4 model missing/unusable, 5 service-side, 1 internal, 130 cancelled
ERROR_TABLE: dict[ErrorCode, ErrorKind] = {
    ErrorCode.BAD_REQUEST: ErrorKind(2, 400),
    ErrorCode.INVALID_OPTION: ErrorKind(2, 400),
    ErrorCode.UNAUTHORIZED: ErrorKind(2, 401, closes_connection=True),
    ErrorCode.NOT_FOUND: ErrorKind(2, 404),
    ErrorCode.METHOD_NOT_ALLOWED: ErrorKind(2, 405),
    ErrorCode.IMAGE_TOO_LARGE: ErrorKind(3, 413, closes_connection=True),
    ErrorCode.IMAGE_TOO_SMALL: ErrorKind(3, 422),
    ErrorCode.UNSUPPORTED_IMAGE: ErrorKind(3, 415),
    ErrorCode.CORRUPT_IMAGE: ErrorKind(3, 400),
    ErrorCode.UNSUPPORTED_VIDEO: ErrorKind(3, 415),
    ErrorCode.CORRUPT_VIDEO: ErrorKind(3, 400),
    ErrorCode.NO_FACE: ErrorKind(3, 422),
    ErrorCode.FACE_TOO_SMALL: ErrorKind(3, 422),
    ErrorCode.POSE_TOO_LARGE: ErrorKind(3, 422),
    ErrorCode.LOW_CONFIDENCE: ErrorKind(3, 422),
    ErrorCode.TOO_BLURRY: ErrorKind(3, 422),
    ErrorCode.FACE_INDEX_OUT_OF_RANGE: ErrorKind(3, 422),
    ErrorCode.MODEL_MISSING: ErrorKind(4, 503, server_side=True),
    ErrorCode.MODEL_CORRUPT: ErrorKind(4, 503, server_side=True),
    ErrorCode.MODEL_MISMATCH: ErrorKind(4, 422, server_side=True),
    ErrorCode.QUEUE_FULL: ErrorKind(5, 429, retryable=True),
    ErrorCode.UPLOAD_TIMEOUT: ErrorKind(5, 408, retryable=True, closes_connection=True),
    ErrorCode.NOT_READY: ErrorKind(5, 503, retryable=True),
    ErrorCode.DEADLINE_EXCEEDED: ErrorKind(5, 504, retryable=True),
    ErrorCode.CANCELLED: ErrorKind(130, 499),  # the caller stopped the work (as Ctrl-C; nginx's 499)
    ErrorCode.INTERNAL: ErrorKind(1, 500, server_side=True),
    ErrorCode.JOB_NOT_DONE: ErrorKind(5, 409, retryable=True),
    ErrorCode.JOB_EXPIRED: ErrorKind(5, 410),
    ErrorCode.JOB_TOO_LARGE: ErrorKind(3, 413),
    ErrorCode.BAD_ARCHIVE: ErrorKind(3, 400),
    ErrorCode.STORAGE_FULL: ErrorKind(5, 507, retryable=True),
}


@dataclass
class FacefuseError(Exception):
    """An error a person can act on: ``message`` says what happened, ``hint`` what to do about it."""

    code: ErrorCode
    message: str
    hint: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}" + (f" ({self.hint})" if self.hint else "")

    @property
    def exit_code(self) -> int:
        return ERROR_TABLE[self.code].exit_code

    @property
    def http_status(self) -> int:
        return ERROR_TABLE[self.code].http_status

    @property
    def kind(self) -> ErrorKind:
        return ERROR_TABLE[self.code]

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code.value, "message": self.message, "hint": self.hint, "details": self.details}

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by fields (not ``args``), so the error crosses process boundaries (Ray replicas) intact."""
        return (type(self), (self.code, self.message, self.hint, self.details))

    def about(self, role: str) -> FacefuseError:
        """The same error, saying which input (``source`` or ``target``) it concerns."""
        return FacefuseError(
            self.code,
            f"{self.message} in the {role} photo",
            self.hint,
            {**self.details, "image": role},
        )
