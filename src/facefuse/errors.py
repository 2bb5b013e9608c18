"""One error type with stable codes, and the one table that maps each code to a CLI exit code and an HTTP status.

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
class ErrorMapping:
    exit_code: int
    http_status: int


# exit codes: 0 ok, 2 usage, 3 input rejected, 4 model missing/unusable, 5 service-side, 1 internal
ERROR_TABLE: dict[ErrorCode, ErrorMapping] = {
    ErrorCode.BAD_REQUEST: ErrorMapping(2, 400),
    ErrorCode.INVALID_OPTION: ErrorMapping(2, 400),
    ErrorCode.UNAUTHORIZED: ErrorMapping(2, 401),
    ErrorCode.NOT_FOUND: ErrorMapping(2, 404),
    ErrorCode.METHOD_NOT_ALLOWED: ErrorMapping(2, 405),
    ErrorCode.IMAGE_TOO_LARGE: ErrorMapping(3, 413),
    ErrorCode.IMAGE_TOO_SMALL: ErrorMapping(3, 422),
    ErrorCode.UNSUPPORTED_IMAGE: ErrorMapping(3, 415),
    ErrorCode.CORRUPT_IMAGE: ErrorMapping(3, 400),
    ErrorCode.UNSUPPORTED_VIDEO: ErrorMapping(3, 415),
    ErrorCode.CORRUPT_VIDEO: ErrorMapping(3, 400),
    ErrorCode.NO_FACE: ErrorMapping(3, 422),
    ErrorCode.FACE_TOO_SMALL: ErrorMapping(3, 422),
    ErrorCode.POSE_TOO_LARGE: ErrorMapping(3, 422),
    ErrorCode.LOW_CONFIDENCE: ErrorMapping(3, 422),
    ErrorCode.TOO_BLURRY: ErrorMapping(3, 422),
    ErrorCode.FACE_INDEX_OUT_OF_RANGE: ErrorMapping(3, 422),
    ErrorCode.MODEL_MISSING: ErrorMapping(4, 503),
    ErrorCode.MODEL_CORRUPT: ErrorMapping(4, 503),
    ErrorCode.MODEL_MISMATCH: ErrorMapping(4, 422),
    ErrorCode.QUEUE_FULL: ErrorMapping(5, 429),
    ErrorCode.UPLOAD_TIMEOUT: ErrorMapping(5, 408),
    ErrorCode.NOT_READY: ErrorMapping(5, 503),
    ErrorCode.DEADLINE_EXCEEDED: ErrorMapping(5, 504),
    ErrorCode.CANCELLED: ErrorMapping(130, 499),  # the caller stopped the work (as Ctrl-C; nginx's 499)
    ErrorCode.INTERNAL: ErrorMapping(1, 500),
    ErrorCode.JOB_NOT_DONE: ErrorMapping(5, 409),
    ErrorCode.JOB_EXPIRED: ErrorMapping(5, 410),
    ErrorCode.JOB_TOO_LARGE: ErrorMapping(3, 413),
    ErrorCode.BAD_ARCHIVE: ErrorMapping(3, 400),
    ErrorCode.STORAGE_FULL: ErrorMapping(5, 507),
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
