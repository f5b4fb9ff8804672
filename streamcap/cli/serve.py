"""`streamcap serve`: the caption server from the command line (`streamcap demo` shows it).

Everything a start can fail on (flags, the port, TLS files, the record folder) is checked
before the model loads, so a port in use costs a second, not a model load. Importing this
module is cheap; the server itself is imported by the functions that run it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamcap.cli.common import say
from streamcap.cli.live_options import (
    add_guard_flags,
    add_partial_interval,
    add_speakers_flag,
    add_vad_flag,
)
from streamcap.cli.model_options import ModelOptions, TaskOptions, add_model_flags, load_engine
from streamcap.cli.numbers import Number, off_or_positive, positive_float, positive_int
from streamcap.cli.serve_setup import (
    ServeCommand,
    check_start,
    config_notes_from_args,
    startup_lines,
)
from streamcap.cli.sink_options import add_sink_flags

if TYPE_CHECKING:
    from streamcap.cli.cluster import ClusterOptions
    from streamcap.core.capacity import CapacityConfig
    from streamcap.runtime.worker_api import Worker
    from streamcap.server.app import CaptionServer


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    from streamcap.cli.cluster import add_cluster_flags

    add_serve_arguments(p)
    add_model_flags(p)
    add_guard_flags(p)
    add_cluster_flags(p, backend=True)
    p.set_defaults(func=run, check_config=config_notes_from_args)


def add_server_flags(p: argparse.ArgumentParser, port: int) -> None:
    from streamcap.server.config import ServerConfig

    g = p.add_argument_group("server")
    g.add_argument("--host", default=ServerConfig().host, help="address to bind")
    g.add_argument(
        "--port",
        type=Number(int),
        default=port,
        help=f"TCP port, 0 = any free one (default: {port})",
    )
    g.add_argument(
        "--record",
        metavar="DIR",
        type=Path,
        help="append every final to DIR/<stream>.jsonl (default: no recording)",
    )


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    from streamcap.core.capacity import CapacityConfig
    from streamcap.server.config import ServerConfig

    add_server_flags(p, ServerConfig().port)
    g = p.add_argument_group("security")
    g.add_argument(
        "--publish-token",
        metavar="TOKEN",
        help="token needed to publish audio (default: $STREAMCAP_PUBLISH_TOKEN; none = open)",
    )
    g.add_argument(
        "--view-token",
        metavar="TOKEN",
        help="token needed to view captions (default: $STREAMCAP_VIEW_TOKEN; none = open)",
    )
    g.add_argument(
        "--tls-cert", type=Path, metavar="PEM", help="certificate: serve https/wss (default: http)"
    )
    g.add_argument(
        "--tls-key", type=Path, metavar="PEM", help="private key for --tls-cert (default: none)"
    )
    g.add_argument(
        "--show-tokens", action="store_true",
        help="print the tokens in the startup URLs even when stderr is not a terminal (it may "
        "be a log: under systemd or docker they are shown as <hidden> without this)",
    )  # fmt: skip
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
        "--max-load", type=Number(float, above=0, high=1, note="a share of the worker"),
        default=CapacityConfig().max_finals_load, metavar="X",
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
        type=off_or_positive,
        default=d.max_frame_rate,
        metavar="N",
        help="messages per second a publisher may send on average, empty ones included "
        "(0 = no limit)",
    )
    g.add_argument(
        "--max-connections",
        type=Number(int, low=2),
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
        type=off_or_positive,
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
    add_sink_flags(p)


def start_worker(
    model: ModelOptions,
    task: TaskOptions,
    capacity: CapacityConfig,
    cluster: ClusterOptions | None = None,
) -> Worker:
    """Load the model, warm it up (which also measures the prior of admission control),
    start the worker thread; with ``--backend ray``, connect to the replicas instead."""
    from streamcap.runtime.worker import InferenceWorker

    if cluster is not None and cluster.uses_ray:
        from streamcap.cli.cluster import start_remote_worker

        return start_remote_worker(cluster, model, task, capacity)
    worker = InferenceWorker(load_engine(model, task), capacity=capacity)
    worker.warm_up(task.decode_language)
    worker.start()
    return worker


def _load_voices(speakers: str, enroll: tuple[tuple[str, str], ...] = ()) -> tuple[Any, ...]:
    """With --speakers auto, load the voice encoder now, not on the event loop at the first
    stream (missing weights: one line at start), and embed the ``--enroll`` samples with the
    encoder the streams' labellers use (`runtime.enrol.EnrolledVoice`s, for every stream)."""
    if speakers != "auto":
        return ()
    from streamcap.cli.live_options import enrolled_voices
    from streamcap.speakers.registry import default_model, encoder_for
    from streamcap.speakers.voice_encoder import shared_encoder

    shared_encoder()
    return enrolled_voices(enroll, encoder_for(default_model()))


def _server_logging() -> None:
    """The server's own INFO lines (stream start/stop, refusals; rate-limited) on stderr, and
    the caption sinks' (OBS connected, OBS not streaming)."""
    for name in ("streamcap.server", "streamcap.sinks"):
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)


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


def run(args: argparse.Namespace) -> int:
    """The command's edge: its flags become `ServeCommand`, which is all that goes on."""
    return serve(ServeCommand.from_args(args))


def serve(cmd: ServeCommand) -> int:
    from rich.console import Console

    from streamcap.cli.cluster import check_ray
    from streamcap.server.access import is_loopback
    from streamcap.server.app import CaptionServer

    check_ray(cmd.cluster)
    config = check_start(cmd.server)  # with its TLS context: an encrypted key is refused here
    show_tokens = cmd.show_tokens or sys.stderr.isatty()
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
    voices = _load_voices(cmd.speakers, cmd.enroll)  # a bad --enroll file: before the model
    worker = start_worker(cmd.model, cmd.task, cmd.capacity, cmd.cluster)

    async def main() -> None:
        server = CaptionServer(config, worker, live=cmd.live, speakers=cmd.speakers, voices=voices)
        await server.start()

        def ready() -> None:
            for line in startup_lines(server, show_tokens):
                err.print(line, highlight=False, markup=False, soft_wrap=True)

        await run_until_signal(server, ready=ready)

    try:
        asyncio.run(main())
    finally:
        worker.stop()
    return 0
