"""`streamcap demo`: the caption server and a speech sample replayed into it as a live stream.

A first look for a new user: it starts `streamcap serve`'s server on a free port, publishes the
bundled sample over a real WebSocket, prints the captions a viewer receives (the partial in
place on a terminal) and the overlay URL to open.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamcap.cli.live_options import live_config
from streamcap.cli.model_options import ModelOptions, TaskOptions, add_model_flags
from streamcap.cli.serve import add_server_flags, run_until_signal, start_worker
from streamcap.cli.serve_setup import check_start, server_config_from_args
from streamcap.core.capacity import CapacityConfig
from streamcap.core.constants import BUNDLED_SAMPLE, SAMPLE_RATE
from streamcap.core.live_config import LiveConfig
from streamcap.server.config import ServerConfig

if TYPE_CHECKING:
    from streamcap.runtime.worker_api import Worker

#: The demo's server listens on any free port unless --port says.
DEMO_PORT = 0
DEMO_STREAM = "demo"


@dataclass(frozen=True)
class DemoCommand:
    """Everything `streamcap demo` is asked, built once from its flags (`from_args`)."""

    server: ServerConfig = field(default_factory=lambda: ServerConfig(port=DEMO_PORT))
    model: ModelOptions = field(default_factory=ModelOptions)
    task: TaskOptions = field(default_factory=TaskOptions)
    live: LiveConfig = field(default_factory=LiveConfig)
    stream: str = DEMO_STREAM
    sample: Path = BUNDLED_SAMPLE
    keep_serving: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DemoCommand:
        model = ModelOptions.from_args(args)
        task = TaskOptions.from_args(args)
        return cls(
            server=server_config_from_args(args, demo=True),
            model=model,
            task=task,
            live=live_config(prompt=task.prompt),
            stream=args.stream,
            sample=args.sample,
            keep_serving=args.keep_serving,
        )


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    add_server_flags(p, DEMO_PORT)
    g = p.add_argument_group("demo")
    g.add_argument("--stream", default=DEMO_STREAM, help="stream id")
    g.add_argument(
        "--sample",
        type=Path,
        default=BUNDLED_SAMPLE,
        help="speech file to replay (default: the bundled JFK sample)",
    )
    g.add_argument(
        "--keep-serving", action="store_true",
        help="keep the server running after the sample (open the overlay, speak into the mic "
        "page) until Ctrl-C",
    )  # fmt: skip
    add_model_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The command's edge: its flags become `DemoCommand`, which is all that goes on."""
    return demo(DemoCommand.from_args(args))


def demo(cmd: DemoCommand) -> int:
    from rich.console import Console

    from streamcap.audio import load_audio

    audio = load_audio(cmd.sample)  # fails early and clearly on a bad file
    config = check_start(cmd.server)
    out = Console()
    worker = start_worker(cmd.model, cmd.task, CapacityConfig())
    try:
        return asyncio.run(_demo(config, worker, audio, cmd, out))
    finally:
        worker.stop()


async def _demo(
    config: ServerConfig, worker: Worker, audio: Any, cmd: DemoCommand, out: Any
) -> int:
    from rich.text import Text

    from streamcap.server.app import CaptionServer
    from streamcap.server.client import publish, watch, ws_url

    server = CaptionServer(config, worker, live=cmd.live)
    await server.start()
    stream = cmd.stream
    out.print(f"[bold]streamcap demo[/]: server on {server.url('/')}")
    until = "" if cmd.keep_serving else "  (up until the sample ends; or --keep-serving)"
    overlay = f"{server.url('/overlay')}?stream={stream}"
    out.print(f"overlay: [link]{overlay}[/link]{until}", soft_wrap=True)
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
    seconds = len(audio) / SAMPLE_RATE
    out.print(f"replaying {cmd.sample.name} ({seconds:.1f} s) as live stream {stream!r}...")
    t0 = time.monotonic()
    try:
        await publish(ws_url(base, "ingest", stream), audio, SAMPLE_RATE)
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
        if cmd.keep_serving:

            def ready() -> None:
                out.print(f"still serving on {server.url('/')} — Ctrl-C to stop")
                out.print(f"open the mic page {server.url('/')} or the overlay above")

            await run_until_signal(server, "streamcap demo", ready)
            return 0
        out.print(
            "server stopped: --keep-serving keeps it up for the overlay and the mic page",
            highlight=False, soft_wrap=True,
        )  # fmt: skip
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
        await server.close()
    return 0 if finals else 1
