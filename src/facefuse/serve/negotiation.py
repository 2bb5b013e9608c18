"""Content negotiation for ``/v1/fuse``: image bytes when the client asks for an image type, JSON otherwise.

JSON wins ties and plain ``*/*`` (what browsers' ``fetch`` and curl send), because JSON carries the faces and
timings too; a client that wants the bytes says ``Accept: image/png`` (or ``image/*``).
"""

from __future__ import annotations

from ..imageio import OUTPUT_ALIASES, OUTPUT_FORMATS

# the subtypes of the output formats' names and aliases (an alias answers as its name); "image/*" names none
_IMAGE_SUBTYPES: dict[str, str | None] = {**{s: OUTPUT_ALIASES.get(s, s) for s in OUTPUT_FORMATS}, "*": None}


def _quality(params: list[str]) -> float:
    for param in params:
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "q":
            try:
                return max(0.0, min(1.0, float(value)))
            except ValueError:
                return 0.0
    return 1.0


def image_format_wanted(accept: str) -> tuple[bool, str | None]:
    """(answer with image bytes?, the image format the client named, if any)."""
    image_q, json_q = 0.0, 0.0
    fmt: str | None = None
    for item in accept.split(","):
        media, *params = item.strip().split(";")
        media = media.strip().lower()
        q = _quality(params)
        kind, _, subtype = media.partition("/")
        if kind == "image" and subtype in _IMAGE_SUBTYPES and q > image_q:
            image_q, fmt = q, _IMAGE_SUBTYPES[subtype]
        elif media in ("application/json", "application/*"):
            json_q = max(json_q, q)
        elif media == "*/*":
            json_q = max(json_q, q * 0.999)  # a bare wildcard loses to an explicit image type of equal weight
    return image_q > json_q, fmt
