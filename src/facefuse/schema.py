"""Option models whose fields carry their own metadata, so every shell is derived from one definition.

Why: the same knob used to be written out three times (library dataclass, argparse flags, HTTP model) and the
copies drifted. An options model (:class:`Options`) is a frozen pydantic model; each field is declared with
:func:`option`, which records its help text, range or choices, label, web control and **scope**:

- ``request``: anyone fusing may set it — a flag of ``facefuse fuse``, a field of ``POST /v1/fuse`` (and so of the
  OpenAPI document), a control on the web page;
- ``operator``: set by whoever runs the process — a flag of ``facefuse fuse`` and a ``facefuse serve`` setting
  (flag + ``FACEFUSE_<NAME>``), never a per-request field (e.g. a cost knob a client must not raise).

The CLI (:mod:`facefuse.cli.options`), the service (:mod:`facefuse.serve.uploads`, :mod:`facefuse.serve.settings`)
and the web page (``GET /v1/options``) read these fields; adding a field here is all it takes to add an option.
Values are validated once, when the model is built; a bad value is ``INVALID_OPTION`` naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from .errors import ErrorCode, FacefuseError


class Scope(str, Enum):
    REQUEST = "request"
    OPERATOR = "operator"


def option(default: Any, title: str, description: str, *, scope: Scope = Scope.REQUEST, control: str | None = None,
           flag: str | None = None, aliases: dict[str, str] | None = None, **constraints: Any) -> Any:
    """A field of an :class:`Options` model.

    ``title`` is the short label of the web control, ``description`` the help text of the flag and the HTTP field.
    ``control`` overrides the web control the page would pick from the type (``face`` = the face picker of the
    photo the field's name starts with); ``flag`` the CLI flag where it is not ``--name-with-dashes``.
    ``aliases`` maps other spellings among a field's choices to the one a control offers (``jpg`` → ``jpeg``).
    ``constraints`` are pydantic's (``ge``, ``le``, ``max_length``…).
    """
    extra: dict[str, Any] = {"x-scope": scope.value}
    if control:
        extra["x-control"] = control
    if flag:
        extra["x-flag"] = flag
    if aliases:
        extra["x-aliases"] = dict(aliases)
    return Field(default, title=title, description=description, json_schema_extra=extra, **constraints)


def _extra(info: FieldInfo) -> dict[str, Any]:
    extra = info.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def flag_name(name: str) -> str:
    """``--name-with-dashes``: the CLI flag of a field or setting that names none of its own."""
    return "--" + name.replace("_", "-")


def flag_of(name: str, info: FieldInfo) -> str:
    """The CLI flag of a field: :func:`flag_name` unless the field names its own."""
    return str(_extra(info).get("x-flag") or flag_name(name))


def scope_of(info: FieldInfo) -> Scope:
    """A field declared without :func:`option` is a request field."""
    return Scope(_extra(info).get("x-scope", Scope.REQUEST.value))


def nested_of(model: type[BaseModel]) -> dict[str, type[Options]]:
    """The fields that are options models of their own (``AnalysisConfig.quality``): each shell gives them their
    own flags and settings, so they are not among :func:`fields_of`."""
    return {name: info.annotation for name, info in model.model_fields.items()
            if isinstance(info.annotation, type) and issubclass(info.annotation, Options)}


def fields_of(model: type[BaseModel], scope: Scope | None = None) -> dict[str, FieldInfo]:
    """The model's own fields (not :func:`nested_of`) in declaration order, all or those of one scope."""
    nested = nested_of(model)
    return {name: info for name, info in model.model_fields.items()
            if name not in nested and (scope is None or scope_of(info) is scope)}


def shell_name(model: type[BaseModel], name: str) -> str:
    """The name a field has in the shells — its ``--flag`` and its service setting (``FACEFUSE_<NAME>``): the
    model's :attr:`Options.shell_prefix` and the field's name (``restore_tile`` for ``RestoreConfig.tile``)."""
    return f"{getattr(model, 'shell_prefix', '')}{name}"


def validation_problems(errors: Sequence[Any]) -> list[dict[str, str]]:
    """pydantic's error list as field → problem pairs a client can show next to its form fields."""
    return [{"field": ".".join(str(p) for p in e["loc"]), "problem": str(e["msg"])} for e in errors]


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a very long number"
    return text if len(text) <= 40 else text[:37] + "…"


def invalid_options(exc: ValidationError, model: type[BaseModel] | None = None) -> FacefuseError:
    """pydantic's errors as one ``INVALID_OPTION`` (``BAD_REQUEST`` for a missing required field).

    The message names the first field and the value given; the hint is that field's own help text, so the CLI, the
    library and the service all say the same thing about the same mistake.
    """
    errors = exc.errors(include_url=False)
    first = errors[0]
    name = str(first["loc"][0]) if first["loc"] else "body"
    info = model.model_fields.get(name) if model is not None else None
    about_field = [e for e in errors if e["loc"][:1] == first["loc"][:1]]  # a union reports once per member
    problem = "; ".join(dict.fromkeys(str(e["msg"]) for e in about_field))
    given = first.get("input")
    shown = "" if first["type"] == "missing" or isinstance(given, (dict, list)) else f" (got {_short(given)})"
    code = ErrorCode.BAD_REQUEST if first["type"] == "missing" else ErrorCode.INVALID_OPTION
    hint = f"{name}: {info.description}" if info is not None and info.description else "see the option's help"
    return FacefuseError(code, f"invalid {name}{shown}: {problem}", hint,
                         {"option": name, "problems": validation_problems(errors)})


_Model = TypeVar("_Model", bound="Options")


class Options(BaseModel):
    """Base of every options model: frozen (safe to share across threads), unknown names refused, validated at
    construction, and a bad value raises :class:`~facefuse.errors.FacefuseError` rather than pydantic's error.

    ``shell_prefix`` goes before each field's name in the shells (see :func:`shell_name`) where a bare name would
    be unclear or taken: ``RestoreConfig.tile`` is ``--restore-tile`` and ``FACEFUSE_RESTORE_TILE``."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)
    shell_prefix: ClassVar[str] = ""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise invalid_options(exc, type(self)) from None

    def replaced(self: _Model, **changes: Any) -> _Model:
        """A copy with ``changes``, validated like a new model (pydantic's ``model_copy`` does not validate)."""
        return type(self)(**{**dict(self), **changes})
