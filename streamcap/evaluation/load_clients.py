"""The load test's clients: publishers at real-time pace and viewers, over the server's sockets.

Apart from what they send (`load_program`) and the server they talk to (`load_server`).
`LoadPlan` says which stream each publisher feeds (its own, or one room where the publishers
are speakers taking turns); a viewer logs every event with the wall time it arrived, which is
what final latency is measured on (`load_report`).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamcap.core.constants import SAMPLE_RATE
from streamcap.evaluation.load_program import Program
from streamcap.server.client import publish, watch, ws_url

SR = SAMPLE_RATE


@dataclass
class LoadPlan:
    """The publishers' streams and programs; with ``room``, all of them speakers P0, P1, ...
    of one stream named "room"."""

    streams: list[str]
    programs: list[Program]
    room: bool = False

    def room_of(self, stream: str) -> str:
        return "room" if self.room else stream

    def speaker_of(self, stream: str) -> str | None:
        return f"P{self.streams.index(stream)}" if self.room else None


@dataclass
class ViewerLog:
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None


async def run_viewer(url: str, log: ViewerLog, stop: asyncio.Event) -> None:
    """Log every event of ``url`` (with its arrival time) until ``stop``."""

    async def consume() -> None:
        async for ev in watch(url):
            log.events.append((time.monotonic(), ev))

    task = asyncio.create_task(consume())
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    for t in (task, stopper):
        t.cancel()
    if task in done and task.exception() is not None:
        log.error = repr(task.exception())


def start_viewers(
    base: str, plan: LoadPlan, per_stream: int, stop: asyncio.Event
) -> tuple[dict[str, list[ViewerLog]], list[asyncio.Task[None]]]:
    """``per_stream`` viewers of each publisher's stream, running until ``stop``."""
    viewers = {s: [ViewerLog() for _ in range(per_stream)] for s in plan.streams}
    tasks = [
        asyncio.create_task(run_viewer(ws_url(base, "captions", plan.room_of(s)), v, stop))
        for s in plan.streams
        for v in viewers[s]
    ]
    return viewers, tasks


async def publish_all(
    base: str, plan: LoadPlan, stagger: float
) -> tuple[list[BaseException | None], dict[str, float]]:
    """Every publisher's program at real-time pace, ``stagger`` seconds apart: each one's
    outcome (None, or what it raised) and the wall time of its first frame (its stream time 0)."""
    t0s: dict[str, float] = {}
    first_frame: dict[str, float] = {}

    async def publisher(i: int, stream: str) -> None:
        await asyncio.sleep(i * stagger)

        def on_frame(_: float) -> None:
            first_frame.setdefault(stream, time.monotonic())

        try:
            url = ws_url(base, "ingest", plan.room_of(stream), speaker=plan.speaker_of(stream))
            await publish(url, plan.programs[i].audio, SR, on_frame=on_frame)
        finally:
            # Frame k (k = 0, 1, ...) leaves at t0 + k * 0.1: audio time t was sent by t0 + t.
            if stream in first_frame:
                t0s[stream] = first_frame[stream]

    results = await asyncio.gather(
        *(publisher(i, s) for i, s in enumerate(plan.streams)), return_exceptions=True
    )
    return list(results), t0s


def close_code(result: object) -> int | None:
    """The close code of a publisher's failure (PublishError or ConnectionClosed), if any."""
    code = getattr(result, "code", None)
    rcvd = getattr(result, "rcvd", None)
    if code is None and rcvd is not None:
        code = rcvd.code
    return code if isinstance(code, int) else None


def sort_closes(
    streams: list[str], results: list[BaseException | None]
) -> tuple[set[str], set[str]]:
    """(refused, closed early): 1013 at the start means admission control refused the stream;
    1013 after `stop`, the server says its last finals were still decoding (they still come,
    and are measured)."""
    pairs = list(zip(streams, results, strict=True))
    refused = {s for s, r in pairs if close_code(r) == 1013 and "full" in str(r)}
    late_close = {s for s, r in pairs if close_code(r) == 1013 and s not in refused}
    return refused, late_close


def delivered(streams: list[str], viewers: dict[str, list[ViewerLog]], record: Path) -> bool:
    """Every final recorded so far has reached every viewer of its stream."""
    for s in streams:
        path = record / f"{s}.jsonl"
        if not path.exists():
            continue
        seqs = {json.loads(x)["seq"] for x in path.read_text().splitlines() if x.strip()}
        for v in viewers[s]:
            if seqs - {ev["seq"] for _, ev in v.events if ev["type"] == "final"}:
                return False
    return True
