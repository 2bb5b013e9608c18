"""Which face(s) of an image to use: the largest (default), one by index (left to right), or all."""

from __future__ import annotations

from ..errors import ErrorCode, FacefuseError
from .quality import raise_first_issue
from .types import Face, ImageAnalysis


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


def select_faces(analysis: ImageAnalysis, choice: str | int, *, allow_all: bool = True,
                 gate: bool = True) -> list[Face]:
    """The chosen faces after the quality gate; raises the gate's error when nothing usable is left.

    ``gate=False`` returns a single chosen face even when the gate flagged it (``all`` still returns every face),
    so the restore stage can try to fix it before the gate's verdict is applied.

    With ``all``, faces that fail the gate are skipped (their issues stay on the face for the caller to report),
    and only when every face fails does the first one's issue become the error.
    """
    faces = analysis.faces
    if not faces:
        raise FacefuseError(ErrorCode.NO_FACE, "no face was found",
                            "use a photo where one face looks toward the camera, well lit and not covered")
    choice = parse_face_choice(choice)
    if choice == "all":
        if not allow_all:
            raise FacefuseError(ErrorCode.INVALID_OPTION, "'all' is not allowed here", "choose 'largest' or an index")
        accepted = [f for f in faces if f.accepted or not gate]
        if not accepted:
            raise_first_issue(max(faces, key=lambda f: f.area))
        return accepted
    if choice == "largest":
        face = max(faces, key=lambda f: f.area)
    else:
        if choice >= len(faces):
            raise FacefuseError(ErrorCode.FACE_INDEX_OUT_OF_RANGE,
                                f"face {choice} was asked for but only {len(faces)} face(s) were found",
                                f"choose an index from 0 to {len(faces) - 1}, counted left to right",
                                {"index": choice, "faces": len(faces)})
        face = faces[choice]
    if gate:
        raise_first_issue(face)
    return [face]
