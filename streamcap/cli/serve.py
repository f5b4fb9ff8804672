"""`streamcap serve`: the caption server from the command line (`streamcap demo` shows it).

Everything a start can fail on (flags, the port, TLS files, the record folder) is checked
before the model loads, so a port in use costs a second, not a model load. Importing this
module is cheap; the server itself is imported by the functions that run it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from streamcap.cli.common import (
    UsageError,
    add_guard_flags,
    add_model_flags,
    add_partial_interval,
    add_speakers_flag,
    add_vad_flag,
    guard_config,
    live_config,
    load_engine,
    positive_float,
    positive_int,
    prompt_of,
    say,
    vad_of,
)
from streamcap.errors import UserError

if TYPE_CHECKING:
    from streamcap.runtime.worker_api import Worker
    from streamcap.server.app import CaptionServer
    from streamcap.server.config import ServerConfig, StreamFactory

SERVE_PORT = 8765


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    from streamcap.cli.cluster import add_cluster_flags

    add_serve_arguments(p)
    add_model_flags(p)
    add_guard_flags(p)
    add_cluster_flags(p, backend=True)
    p.set_defaults(func=run_serve)


def add_server_flags(p: argparse.ArgumentParser, port: int) -> None:
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to bind")
    g.add_argument(
        "--port", type=int, default=port, help=f"TCP port, 0 = any free one (default: {port})"
    )
    g.add_argument(
        "--record",
        metavar="DIR",
        type=Path,
        help="append every final to DIR/<stream>.jsonl (default: no recording)",
    )


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    from streamcap.server.config import ServerConfig

    add_server_flags(p, SERVE_PORT)
    g = p.add_argument_group("security")
    g.add_argument(
        "--publish-token",
        metavar="TOKEN",
        default=os.environ.get("STREAMCAP_PUBLISH_TOKEN"),
        help="token needed to publish audio (default: $STREAMCAP_PUBLISH_TOKEN; none = open)",
    )
    g.add_argument(
        "--view-token",
        metavar="TOKEN",
        default=os.environ.get("STREAMCAP_VIEW_TOKEN"),
        help="token needed to view captions (default: $STREAMCAP_VIEW_TOKEN; none = open)",
    )
    g.add_argument(
        "--tls-cert", type=Path, metavar="PEM", help="certificate: serve https/wss (default: http)"
    )
    g.add_argument(
        "--tls-key", type=Path, metavar="PEM", help="private key for --tls-cert (default: none)"
    )
    g.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="browser origin allowed besides the server's own, e.g. https://obs.example; "
        "'*' allows any (repeatable; default: the server's own only)",
    )
    g.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="host name this server answers to besides IP addresses, localhost and the --host "
        "name, e.g. captions.example or .example.com for a whole domain (repeatable; guards "
        "against DNS rebinding; default: none)",
    )
    g.add_argument(
        "--metrics-token",
        metavar="TOKEN",
        default=os.environ.get("STREAMCAP_METRICS_TOKEN"),
        help="token needed for /metrics (default: $STREAMCAP_METRICS_TOKEN; none = open when "
        "bound to localhost, loopback clients only otherwise)",
    )
    g = p.add_argument_group("limits")
    d = ServerConfig()
    g.add_argument(
        "--max-streams", type=positive_int, default=d.max_streams, metavar="N",
        help="publishers at once",
    )  # fmt: skip
    g.add_argument(
        "--max-speakers-per-room", type=positive_int, default=d.max_speakers_per_room,
        metavar="N",
        help="publishers one stream (a room) may have at once, each with its own speaker name "
        "(/ingest?stream=ROOM&speaker=NAME)",
    )  # fmt: skip
    g.add_argument(
        "--max-load", type=load_share, default=0.25, metavar="X",
        help="admission control: refuse a new publisher (1013) when the streams' finals would "
        "take more than this share of the worker, as measured (0-1)",
    )  # fmt: skip
    g.add_argument(
        "--no-admission", dest="admission", action="store_false",
        help="no admission control: admit publishers up to --max-streams whatever the load",
    )  # fmt: skip
    g.add_argument(
        "--max-viewers", type=positive_int, default=d.max_viewers, metavar="N",
        help="viewers at once",
    )  # fmt: skip
    g.add_argument(
        "--max-frame-bytes", type=positive_int, default=d.max_frame_bytes, metavar="N",
        help="largest audio frame a publisher may send, in bytes",
    )  # fmt: skip
    g.add_argument(
        "--idle-timeout",
        type=positive_float,
        default=d.idle_timeout_s,
        metavar="S",
        help="close a publisher silent on the wire this long",
    )
    g.add_argument(
        "--start-timeout",
        type=positive_float,
        default=d.start_timeout_s,
        metavar="S",
        help="close a publisher that sends no start message within S seconds",
    )
    g.add_argument(
        "--max-frame-rate",
        type=float,
        default=d.max_frame_rate,
        metavar="N",
        help="messages per second a publisher may send on average, empty ones included "
        "(0 = no limit)",
    )
    g.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="open connections at once, counted from the accept "
        "(default: max streams + max viewers + 64)",
    )
    g.add_argument(
        "--max-pending-per-address",
        type=positive_int,
        default=d.max_pending_per_address,
        metavar="N",
        help="connections from one client address that are not yet authenticated (a viewer "
        "before its token is checked, a publisher before its start)",
    )
    g.add_argument(
        "--burst",
        type=float,
        default=d.burst_s,
        metavar="S",
        help="seconds of audio a publisher may run ahead of real time (0 = no flood guard)",
    )
    g.add_argument(
        "--unknown-stream",
        choices=["wait", "reject"],
        default=d.unknown_stream,
        help="viewer of a stream with no publisher yet: wait for it, or close 1008",
    )
    g.add_argument(
        "--retain-streams",
        type=positive_int,
        default=d.retain_streams,
        metavar="N",
        help="ended streams kept for replay",
    )
    g.add_argument("--web-dir", type=Path, help=argparse.SUPPRESS)
    captions = p.add_argument_group("captions")
    add_partial_interval(captions)
    add_speakers_flag(captions)
    add_vad_flag(captions)


def server_config(args: argparse.Namespace, *, demo: bool = False) -> ServerConfig:
    """The `ServerConfig` for the flags; its own checks (e.g. --tls-cert without --tls-key)
    are about flags, so they become usage errors (exit 2), like a --port out of range."""
    from streamcap.server.config import ServerConfig

    port = args.port
    if not 0 <= port <= 65535:  # getaddrinfo would wrap 99999 around, bind then fail
        raise UsageError(f"--port must be 0-65535 (0 = any free one), got {port}")
    try:
        if demo:
            return ServerConfig(
                host=args.host,
                port=args.port,
                record_dir=args.record,
                default_language=args.language,
            )
        burst = args.burst if args.burst and args.burst > 0 else None
        rate = args.max_frame_rate if args.max_frame_rate and args.max_frame_rate > 0 else None
        return ServerConfig(
            host=args.host,
            port=args.port,
            publish_token=args.publish_token or None,
            view_token=args.view_token or None,
            metrics_token=args.metrics_token or None,
            allowed_origins=tuple(args.allow_origin),
            allowed_hosts=tuple(args.allow_host),
            max_streams=args.max_streams,
            max_speakers_per_room=args.max_speakers_per_room,
            admission=getattr(args, "admission", True),
            max_viewers=args.max_viewers,
            max_connections=args.max_connections,
            max_pending_per_address=args.max_pending_per_address,
            max_frame_bytes=args.max_frame_bytes,
            idle_timeout_s=args.idle_timeout,
            start_timeout_s=args.start_timeout,
            burst_s=burst,
            max_frame_rate=rate,
            unknown_stream=args.unknown_stream,
            retain_streams=args.retain_streams,
            record_dir=args.record,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            web_dir=args.web_dir,
            default_language=args.language,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None


def check_start(config: ServerConfig) -> None:
    """What would make the server fail once the model is loaded, checked before: the port,
    the TLS files, the record folder."""
    if config.port:
        check_port(config.host, config.port)
    if config.tls_cert is not None and config.tls_key is not None:
        import ssl

        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                config.tls_cert, config.tls_key
            )
        except (OSError, ssl.SSLError) as e:
            raise UserError(
                f"cannot use --tls-cert {config.tls_cert} / --tls-key {config.tls_key}: "
                f"{getattr(e, 'strerror', None) or e}"
            ) from None
    if config.record_dir is not None:
        try:
            config.record_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create --record {config.record_dir}: {e.strerror}") from None


def check_port(host: str, port: int) -> None:
    """UserError if ``host:port`` cannot be bound. The probe binds as the server will (with
    SO_REUSEADDR, so a port left in TIME_WAIT by a previous run is fine) and closes at once."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as e:
        raise UserError(f"cannot listen on --host {host!r}: {e.strerror}") from None
    for family, kind, proto, _name, addr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                with contextlib.suppress(OSError):
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(addr)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    raise UserError(
                        f"port {port} on {host} is already in use (another streamcap serve?): "
                        "pick another with --port, or --port 0 for any free one"
                    ) from None
                raise UserError(f"cannot listen on {host}:{port}: {e.strerror}") from None


def load_share(value: str) -> float:
    """A share of the worker, in (0, 1]."""
    x = positive_float(value)
    if x > 1:
        raise argparse.ArgumentTypeError(f"{value} is more than the whole worker (1)")
    return x


def start_worker(args: argparse.Namespace) -> Worker:
    """Load the model, warm it up (which also measures the prior of admission control),
    start the worker thread; with ``--backend ray``, connect to the replicas instead."""
    from streamcap.core.capacity import CapacityConfig
    from streamcap.runtime.worker import InferenceWorker

    capacity = CapacityConfig(max_finals_load=getattr(args, "max_load", 0.25))
    if getattr(args, "backend", "local") == "ray":
        from streamcap.cli.cluster import start_remote_worker

        return start_remote_worker(args, capacity)
    worker = InferenceWorker(load_engine(args), capacity=capacity)
    language = getattr(args, "language", None)
    worker.warm_up(None if language == "auto-each" else language)
    worker.start()
    return worker


def _stream_factory(
    args: argparse.Namespace, worker: Worker, config: ServerConfig
) -> StreamFactory:
    from streamcap.server.config import live_stream_factory

    base = live_config(
        partial_interval=args.partial_interval,
        prompt=prompt_of(args),
        guard=guard_config(args),
        vad=vad_of(args),
    )
    speakers = getattr(args, "speakers", None) or "off"
    if speakers == "auto":  # load the voice encoder now, not on the event loop at the first
        # stream (missing weights: one line at start)
        from streamcap.speakers.voice_encoder import shared_encoder

        shared_encoder()
    return live_stream_factory(worker, base, config.default_language, speakers)


def _server_logging() -> None:
    """The server's own INFO lines (stream start/stop, refusals; rate-limited) on stderr."""
    logger = logging.getLogger("streamcap.server")
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)


def startup_lines(server: CaptionServer) -> list[str]:
    """What `serve` prints once listening: every URL a person needs, tokens included where
    the URL is useless without them (the operator set them; they never go to the log)."""
    cfg = server.config

    def q(**params: str | None) -> str:
        return urlencode({k: v for k, v in params.items() if v})

    view, pub = cfg.view_token, cfg.publish_token
    mic = server.url("/") + (f"?{q(token=pub, view_token=view)}" if pub or view else "")
    lines = [
        f"streamcap serving on {server.url('/')}",
        f"  mic page   {mic}",
        f"  overlay    {server.url('/overlay')}?{q(stream='ID', token=view)}",
        f"  ingest     {server.url('/ingest', websocket=True)}?{q(stream='ID')}"
        + ("  (publish token required)" if pub else ""),
        f"  captions   {server.url('/captions', websocket=True)}?{q(stream='ID', since='0')}"
        + ("  (view token required)" if view else ""),
        f"  metrics    {server.url('/metrics')}"
        + ("  (metrics token required)" if cfg.metrics_token else ""),
    ]
    return lines


async def run_until_signal(
    server: CaptionServer, prog: str = "streamcap serve", ready: Callable[[], None] | None = None
) -> None:
    """Serve until SIGINT/SIGTERM, then close (open utterances get their finals); ``prog`` is
    the command that speaks (`demo --keep-serving` runs this too). ``ready`` (the URLs) runs
    once the handlers are in place: a Ctrl-C right after the URLs shows still shuts down
    cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready()
    await stop.wait()
    say(f"{prog}: shutting down (finishing open utterances)...")
    await server.close()


def run_serve(args: argparse.Namespace) -> int:
    from rich.console import Console

    from streamcap.cli.cluster import check_cluster_flags
    from streamcap.server.access import is_loopback
    from streamcap.server.app import CaptionServer

    config = server_config(args)
    check_cluster_flags(args, args.command_parser.get_default)
    check_start(config)
    err = Console(stderr=True)
    if not is_loopback(config.host):
        if config.publish_token is None:
            err.print(
                "[yellow]warning:[/] listening beyond this machine with no --publish-token: "
                "anyone who can reach it can use your CPU"
            )
        if not config.tls:
            err.print(
                "[yellow]note:[/] browsers only allow the microphone on https or localhost: "
                "add --tls-cert/--tls-key for the mic page from other machines"
            )
    _server_logging()
    worker = start_worker(args)

    async def main() -> None:
        server = CaptionServer(config, worker, _stream_factory(args, worker, config))
        await server.start()

        def ready() -> None:
            for line in startup_lines(server):
                err.print(line, highlight=False, markup=False, soft_wrap=True)

        await run_until_signal(server, ready=ready)

    try:
        asyncio.run(main())
    finally:
        worker.stop()
    return 0
