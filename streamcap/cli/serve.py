"""`streamcap serve` and `streamcap demo` (wired into `streamcap.cli`, which adds the model flags:
--model, --assistant, --device, --language, --task, --threads)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from streamcap.server.access import is_loopback
from streamcap.server.app import CaptionServer, ServerConfig

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "jfk.wav"


def _add_common(p: argparse.ArgumentParser, port: int) -> None:
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    g.add_argument("--port", type=int, default=port, help=f"port (default: {port}; 0 = any free)")
    g.add_argument(
        "--record", metavar="DIR", type=Path, help="append every final to DIR/<stream>.jsonl"
    )


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    _add_common(p, 8765)
    g = p.add_argument_group("security")
    g.add_argument(
        "--publish-token",
        default=os.environ.get("STREAMCAP_PUBLISH_TOKEN"),
        help="token needed to publish audio (default: $STREAMCAP_PUBLISH_TOKEN; none = open)",
    )
    g.add_argument(
        "--view-token",
        default=os.environ.get("STREAMCAP_VIEW_TOKEN"),
        help="token needed to view captions (default: $STREAMCAP_VIEW_TOKEN; none = open)",
    )
    g.add_argument("--tls-cert", type=Path, help="PEM certificate: serve https/wss")
    g.add_argument("--tls-key", type=Path, help="PEM private key for --tls-cert")
    g.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="browser origin allowed besides the server's own, e.g. https://obs.example; "
        "'*' allows any (repeatable)",
    )
    g.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="host name this server answers to besides IP addresses, localhost and the --host "
        "name, e.g. captions.example or .example.com for a whole domain (repeatable; guards "
        "against DNS rebinding)",
    )
    g.add_argument(
        "--metrics-token",
        default=os.environ.get("STREAMCAP_METRICS_TOKEN"),
        help="token needed for /metrics (default: $STREAMCAP_METRICS_TOKEN; none = open when "
        "bound to localhost, loopback clients only otherwise)",
    )
    g = p.add_argument_group("limits")
    d = ServerConfig()
    g.add_argument("--max-streams", type=int, default=d.max_streams, help="publishers at once")
    g.add_argument("--max-viewers", type=int, default=d.max_viewers, help="viewers at once")
    g.add_argument(
        "--max-frame-bytes", type=int, default=d.max_frame_bytes, help="largest audio frame"
    )
    g.add_argument(
        "--idle-timeout",
        type=float,
        default=d.idle_timeout_s,
        metavar="S",
        help="close a publisher silent on the wire this long",
    )
    g.add_argument(
        "--start-timeout",
        type=float,
        default=d.start_timeout_s,
        metavar="S",
        help=f"close a publisher that sends no start message within S seconds "
        f"(default: {d.start_timeout_s:g})",
    )
    g.add_argument(
        "--max-frame-rate",
        type=float,
        default=d.max_frame_rate,
        metavar="N",
        help=f"messages per second a publisher may send on average, empty ones included "
        f"(default: {d.max_frame_rate:g}; 0 = no limit)",
    )
    g.add_argument(
        "--max-connections",
        type=int,
        default=None,
        metavar="N",
        help="open connections at once, counted before any handshake "
        "(default: max streams + max viewers + 64)",
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
        "--retain-streams", type=int, default=d.retain_streams, help="ended streams kept for replay"
    )
    g.add_argument("--web-dir", type=Path, help=argparse.SUPPRESS)
    g = p.add_argument_group("captions")
    g.add_argument(
        "--partial-interval",
        type=float,
        default=None,
        metavar="S",
        help="seconds of new speech between partial captions (default: the pipeline's)",
    )


def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    _add_common(p, 0)
    p.add_argument("--stream", default="demo", help="stream id (default: demo)")
    p.add_argument("--sample", type=Path, default=SAMPLE, help="speech file to replay")
    p.add_argument(
        "--keep-serving", action="store_true", help="keep the server running after the sample"
    )


def server_config(args: argparse.Namespace, *, demo: bool = False) -> ServerConfig:
    if demo:
        return ServerConfig(
            host=args.host,
            port=args.port,
            record_dir=args.record,
            default_language=getattr(args, "language", None),
        )
    burst = args.burst if args.burst and args.burst > 0 else None
    frame_rate = args.max_frame_rate if args.max_frame_rate and args.max_frame_rate > 0 else None
    return ServerConfig(
        host=args.host,
        port=args.port,
        publish_token=args.publish_token or None,
        view_token=args.view_token or None,
        metrics_token=args.metrics_token or None,
        allowed_origins=tuple(args.allow_origin),
        allowed_hosts=tuple(args.allow_host),
        max_streams=args.max_streams,
        max_viewers=args.max_viewers,
        max_connections=args.max_connections,
        max_frame_bytes=args.max_frame_bytes,
        idle_timeout_s=args.idle_timeout,
        start_timeout_s=args.start_timeout,
        burst_s=burst,
        max_frame_rate=frame_rate,
        unknown_stream=args.unknown_stream,
        retain_streams=args.retain_streams,
        record_dir=args.record,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        web_dir=args.web_dir,
        default_language=getattr(args, "language", None),
    )


def _start_worker(args: argparse.Namespace) -> Any:
    from streamcap.cli import make_engine
    from streamcap.runtime.worker import InferenceWorker

    worker = InferenceWorker(make_engine(args))
    worker.start()
    return worker


def _stream_factory(args: argparse.Namespace, worker: Any, config: ServerConfig) -> Any:
    from dataclasses import replace

    from streamcap.runtime.stream import LiveConfig
    from streamcap.server.config import live_stream_factory

    base = LiveConfig()
    if getattr(args, "partial_interval", None) is not None:
        base = replace(base, policy=replace(base.policy, partial_interval_s=args.partial_interval))
    return live_stream_factory(worker, base, config.default_language)


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


async def _run_until_signal(server: CaptionServer) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print("streamcap: shutting down (finishing open utterances)...", file=sys.stderr)
    await server.close()


def run_serve(args: argparse.Namespace) -> int:
    from rich.console import Console

    config = server_config(args)
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
    err.print("loading model...")
    worker = _start_worker(args)

    async def main() -> None:
        server = CaptionServer(config, worker, _stream_factory(args, worker, config))
        await server.start()
        for line in startup_lines(server):
            err.print(line, highlight=False, markup=False, soft_wrap=True)
        await _run_until_signal(server)

    try:
        asyncio.run(main())
    finally:
        worker.stop()
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from streamcap.audio import load_audio

    audio = load_audio(args.sample)  # fails early and clearly on a bad file
    config = server_config(args, demo=True)
    out = Console()
    out.print("loading model...", style="dim")
    worker = _start_worker(args)
    try:
        return asyncio.run(_demo(config, worker, audio, args, out))
    finally:
        worker.stop()


async def _demo(
    config: ServerConfig, worker: Any, audio: Any, args: argparse.Namespace, out: Any
) -> int:
    from rich.text import Text

    from streamcap.server.client import publish, watch, ws_url

    server = CaptionServer(config, worker)
    await server.start()
    stream = args.stream
    out.print(f"[bold]streamcap demo[/]: server on {server.url('/')}")
    out.print(f"overlay: [link]{server.url('/overlay')}?stream={stream}[/link]")
    base = server.url("", websocket=True)
    finals: list[str] = []
    live = {"partial": ""}
    seen = {"seq": 0}

    async def viewer() -> None:
        async for ev in watch(ws_url(base, "captions", stream, since=0)):
            seen["seq"] = max(seen["seq"], int(ev.get("seq", 0)))
            if ev.get("type") == "final":
                if live["partial"] and out.is_terminal:
                    out.file.write("\r\x1b[2K")
                live["partial"] = ""
                text = ev["text"].strip()
                if text:
                    finals.append(text)
                    line = Text(f"[{ev['start']:6.2f}-{ev['end']:6.2f}] ", style="dim")
                    line.append(text, style="bold")
                    line.append(f"  ({ev['latency_ms']:.0f} ms)", style="dim")
                    out.print(line, soft_wrap=True)
            elif ev.get("type") == "partial" and out.is_terminal:
                live["partial"] = ev["text"].strip()
                width = max(10, out.width - 4)
                shown = live["partial"][-width:]
                out.file.write(f"\r\x1b[2K\x1b[2m… {shown}\x1b[0m")
                out.file.flush()

    watcher = asyncio.create_task(viewer())
    seconds = len(audio) / 16000
    out.print(f"replaying {args.sample.name} ({seconds:.1f} s) as live stream {stream!r}...")
    t0 = time.monotonic()
    try:
        await publish(ws_url(base, "ingest", stream), audio, 16000)
        # The publisher's close comes after the last final: let the viewer catch up with it.
        entry = server.hub.get(stream)
        last = entry.log.last_seq if entry is not None else 0
        deadline = time.monotonic() + 10
        while seen["seq"] < last and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        out.print(
            f"[green]done[/]: {len(finals)} final caption(s) in {time.monotonic() - t0:.1f} s "
            f"for {seconds:.1f} s of audio"
        )
        if args.keep_serving:
            out.print(f"still serving on {server.url('/')} — Ctrl-C to stop")
            out.print(f"open the mic page {server.url('/')} or the overlay above")
            await _run_until_signal(server)
            return 0
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
        await server.close()
    return 0 if finals else 1
