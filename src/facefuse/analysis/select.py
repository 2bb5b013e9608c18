"""Which face(s) of an image to use: the largest (default), one by index (left to right), or all.

Only the choice; whether a chosen face is good enough is the gate's verdict (:mod:`facefuse.stages.gate`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ErrorCode, FacefuseError
from .types import Face, largest


def parse_face_choice(value: str | int) -> str | int:
    """``"largest"``, ``"all"`` or a non-negative index, from CLI or form text alike."""
    if isinstance(value, int) and not isinstance(value, bool):
        choice: str | int = value
    else:
        text = str(value).strip().lower()
        choice = int(text) if text.lstrip("-").isdigit() else text
    if choice in ("largest", "all") or (isinstance(choice, int) and choice >= 0):
        return choice
    raise FacefuseError(ErrorCode.INVALID_OPTION, f"face choice '{value}' is not valid",
                        "use 'largest', 'all' or a face index counted from 0, left to right", {"value": str(value)})


def choose_faces(faces: Sequence[Face], choice: str | int, *, allow_all: bool = True) -> list[Face]:
    """The chosen faces of a photo (``faces`` ordered left to right): every face for ``all``, else one.

    ``choice`` is a validated option (:class:`~facefuse.fusion.engine.FusionOptions` fields, or text passed through
    :func:`parse_face_choice`). Raises NO_FACE for a photo without faces and FACE_INDEX_OUT_OF_RANGE for an index
    past the last face.
    """
    if not faces:
        raise FacefuseError(ErrorCode.NO_FACE, "no face was found",
                            "use a photo where one face looks toward the camera, well lit and not covered")
    if choice == "all":
        if not allow_all:
            raise FacefuseError(ErrorCode.INVALID_OPTION, "'all' is not allowed here", "choose 'largest' or an index")
        return list(faces)
    if choice == "largest":
        return [largest(faces)]
    assert isinstance(choice, int)
    if choice >= len(faces):
        raise FacefuseError(ErrorCode.FACE_INDEX_OUT_OF_RANGE,
                            f"face {choice} was asked for but only {len(faces)} face(s) were found",
                            f"choose an index from 0 to {len(faces) - 1}, counted left to right",
                            {"index": choice, "faces": len(faces)})
    return [faces[choice]]
