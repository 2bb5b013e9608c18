"""`facefuse serve`: the HTTP service and its web page (http://127.0.0.1:8000 by default).

Every option is also read from a ``FACEFUSE_<NAME>`` environment variable (command line wins). Prefer the
environment for ``--api-key``: command lines are visible to other users in the process list.
"""

from __future__ import annotations

import argparse
import logging
import signal
from typing import Any

from pydantic import ValidationError

from ..errors import ErrorCode, FacefuseError
from ..serve.settings import LOOPBACK_HOSTS, ServeSettings
from ..schema import flag_of


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run the HTTP service with its web page",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, info in ServeSettings.model_fields.items():
        default = info.get_default(call_default_factory=True)
        shown = "(none)" if default in (None, "", []) else ",".join(default) if isinstance(default, list) else default
        parser.add_argument(flag_of(name, info), dest=name, default=None, metavar=name.upper(),
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
        flag = flag_of(name, ServeSettings.model_fields[name]) if name in ServeSettings.model_fields else name
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"{flag} / FACEFUSE_{name.upper()}: {first['msg']}",
                            "see `facefuse serve --help`", {"option": name}) from None


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.host not in LOOPBACK_HOSTS and settings.api_key is None:
        logging.getLogger("facefuse.serve").warning(
            "listening on %s without an API key: anyone who can reach this address can use the service",
            settings.host)
    if settings.backend == "ray":
        return run_on_ray(settings, args.log_level)
    return run_local(settings, args.log_level)


def run_on_ray(settings: ServeSettings, log_level: str) -> int:
    """Join the Ray cluster (``RAY_ADDRESS``, a local ``ray start`` cluster, or a new one-machine cluster) and run
    the application on it until Ctrl-C."""
    try:
        import ray
        from ray import serve

        from ..serve.ray_serve import ray_app
    except ImportError as exc:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"--backend ray needs Ray Serve ({exc})",
                            "install it with: pip install 'facefuse[ray]'", {"option": "backend"}) from None
    ray.init(log_to_driver=log_level in ("debug", "info"))  # the replicas' logs, on this terminal
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # systemd/Kubernetes stop = Ctrl-C: shut down cleanly
    try:
        serve.start(http_options={"host": settings.host, "port": settings.port})
    except RuntimeError as exc:  # Ray's error from its HTTP proxy actor, wrapping the proxy's own
        if "Failed to bind" in str(exc):
            raise cannot_listen(settings) from None
        raise FacefuseError(ErrorCode.NOT_READY, f"Ray Serve did not start: {exc}",
                            "see Ray's logs (`ray logs` or the Ray dashboard)") from None
    try:
        serve.run(ray_app(settings), name="facefuse", route_prefix="/", blocking=True)
    except KeyboardInterrupt:
        serve.shutdown()  # a normal stop: the replicas go with the application
    except RuntimeError as exc:  # a deployment could not start (its replicas' logs say why)
        raise FacefuseError(ErrorCode.NOT_READY, f"the Ray application did not start: {exc}",
                            "see the replica logs (`ray logs` or the Ray dashboard)") from None
    return 0


def run_local(settings: ServeSettings, log_level: str) -> int:
    import uvicorn

    from ..runtime import size_opencv_pool
    from ..serve.app import create_app
    from ..serve.server import server_config

    size_opencv_pool(settings.workers)  # this process is the server's own (facefuse.runtime)
    server = uvicorn.Server(server_config(create_app(settings), settings, log_level=log_level,
                                         access_log=log_level == "debug"))
    try:
        server.run()
    except (KeyboardInterrupt, SystemExit):
        # uvicorn re-raises Ctrl-C after a graceful shutdown (a normal stop), and exits with its own code when it
        # cannot start; our exit codes come from the error table instead
        pass
    if not server.started:  # uvicorn has logged why (typically the address is in use)
        raise cannot_listen(settings)
    return 0


def cannot_listen(settings: ServeSettings) -> FacefuseError:
    """Either backend's answer when the server cannot take its address (typically: the port is in use)."""
    return FacefuseError(ErrorCode.INVALID_OPTION, f"could not listen on {settings.host}:{settings.port}",
                         "choose another --port (or stop the program using it), or check --host",
                         {"host": settings.host, "port": settings.port})
