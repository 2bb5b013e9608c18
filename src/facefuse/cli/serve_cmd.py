"""`facefuse serve`: the HTTP service and its web page (http://127.0.0.1:8000 by default).

Every option is also read from a ``FACEFUSE_<NAME>`` environment variable (command line wins). Prefer the
environment for ``--api-key``: command lines are visible to other users in the process list.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from pydantic import ValidationError

from ..errors import ErrorCode, FacefuseError
from ..serve.settings import ServeSettings
from .options import flag_name


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run the HTTP service with its web page",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, info in ServeSettings.model_fields.items():
        default = info.get_default(call_default_factory=True)
        shown = "(none)" if default in (None, "", []) else ",".join(default) if isinstance(default, list) else default
        parser.add_argument(flag_name(name), dest=name, default=None, metavar=name.upper(),
                            help=f"{info.description} [env FACEFUSE_{name.upper()}; default {shown}]")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.set_defaults(handler=run)


def settings_from_args(args: argparse.Namespace) -> ServeSettings:
    given: dict[str, Any] = {name: getattr(args, name) for name in ServeSettings.model_fields
                             if getattr(args, name, None) is not None}
    try:
        return ServeSettings(**given)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else "settings"
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"{flag_name(name)} / FACEFUSE_{name.upper()}: {first['msg']}",
                            "see `facefuse serve --help`", {"option": name}) from None


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from ..serve.app import create_app

    settings = settings_from_args(args)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.host not in ("127.0.0.1", "localhost", "::1") and settings.api_key is None:
        logging.getLogger("facefuse.serve").warning(
            "listening on %s without an API key: anyone who can reach this address can use the service",
            settings.host)
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host=settings.host, port=settings.port,
                                           log_level=args.log_level, access_log=args.log_level == "debug",
                                           server_header=False))
    try:
        server.run()
    except (KeyboardInterrupt, SystemExit):
        # uvicorn re-raises Ctrl-C after a graceful shutdown (a normal stop), and exits with its own code when it
        # cannot start; our exit codes come from the error table instead
        pass
    if not server.started:  # uvicorn has logged why (typically the address is in use)
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"could not listen on {settings.host}:{settings.port}",
                            "choose another --port (or stop the program using it), or check --host",
                            {"host": settings.host, "port": settings.port})
    return 0
