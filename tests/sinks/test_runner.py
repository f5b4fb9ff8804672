"""The sink driver (`sinks.runner.SinkRunner`) on its own event loop: each sink its own task
and bounded queue. The sinks here are small real implementations of the port (a list, one
that never answers, one that fails, one that is slow): what is under test is the driver.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from streamcap.core.captions import Caption
from streamcap.sinks.base import CaptionSink, SinkError
from streamcap.sinks.runner import SinkRunner


def cap(seq: int, kind: str = "final", segment: int | None = None, stream: str = "a") -> Caption:
    seg = seq if segment is None else segment
    return Caption(kind, stream, seq, seg, f"{kind} {seq}", seq, seq + 0.5, 0, 0.0)  # type: ignore[arg-type]


class ListSink:
    def __init__(self, name: str = "list:a", partials: bool = False, pause: float = 0.0) -> None:
        self.name = name
        self.wants_partials = partials
        self.pause = pause
        self.got: list[Caption] = []
        self.closed = False

    async def deliver(self, caption: Caption) -> None:
        if self.pause:
            await asyncio.sleep(self.pause)
        self.got.append(caption)

    async def aclose(self) -> None:
        self.closed = True


class StuckSink(ListSink):
    """Never answers."""

    async def deliver(self, caption: Caption) -> None:
        await asyncio.Event().wait()


class FailingSink(ListSink):
    def __init__(self, secret: str) -> None:
        super().__init__("failing:a")
        self.secret = secret

    async def deliver(self, caption: Caption) -> None:
        if caption.seq % 2:
            raise RuntimeError(f"POST https://example/cc?key={self.secret} failed")
        raise SinkError("HTTP 503 after 5 tries")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_the_port_is_what_the_sinks_are() -> None:
    assert isinstance(ListSink(), CaptionSink)


def test_finals_in_order_partials_only_when_wanted_and_coalesced() -> None:
    async def go() -> tuple[ListSink, ListSink, SinkRunner]:
        finals_only, with_partials = ListSink(), ListSink("p:a", partials=True, pause=0.05)
        runner = SinkRunner([("list", "a", finals_only), ("p", "a", with_partials)])
        runner.start()
        # seq 1 final; 2, 3, 4 partials of segment 5 while the slow sink is busy: coalesced
        for c in [cap(1), cap(2, "partial", 5), cap(3, "partial", 5), cap(4, "partial", 5)]:
            runner.offer(c)
        runner.offer(cap(6, stream="other"))  # another stream's: not theirs
        await asyncio.sleep(0.3)
        runner.offer(cap(7, "partial", 8))
        runner.offer(cap(9, "final", 8))  # the final of the waiting partial's segment
        await runner.aclose()
        return finals_only, with_partials, runner

    finals_only, with_partials, runner = run(go())
    assert [c.seq for c in finals_only.got] == [1, 9]
    assert [c.seq for c in with_partials.got] == [1, 4, 9]  # the latest partial, then the final
    figs = {f.name: f for f in runner.figures()}
    assert figs["p:a"].coalesced_partials == 2 and figs["p:a"].delivered_partials == 1
    assert figs["list:a"].delivered_finals == 2 and figs["list:a"].waiting == 0
    assert finals_only.closed and with_partials.closed


def test_a_sink_that_never_answers_holds_up_nothing_else() -> None:
    async def go() -> tuple[list[float], SinkRunner]:
        stuck, healthy = StuckSink("stuck:a"), ListSink("list:b")
        runner = SinkRunner([("stuck", "a", stuck), ("list", "b", healthy)], close_timeout_s=0.2)
        runner.start()
        waits = []
        loop = asyncio.get_running_loop()
        for k in range(50):
            runner.offer(cap(k + 1, stream="a"))
            t0 = loop.time()
            runner.offer(cap(k + 1, stream="b"))
            while len(healthy.got) <= k:
                await asyncio.sleep(0)
            waits.append(loop.time() - t0)
        figs = {f.name: f for f in runner.figures()}
        assert figs["stuck:a"].waiting == 49 and figs["stuck:a"].busy_s > 0
        await runner.aclose()
        return waits, runner

    waits, runner = run(go())
    assert max(waits) < 0.5  # each of b's captions reached b's sink at once
    stuck = {f.name: f for f in runner.figures()}["stuck:a"]
    assert stuck.dropped_shutdown == 50  # counted, not lost silently


def test_a_full_queue_drops_the_oldest_final_logged_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def go() -> SinkRunner:
        runner = SinkRunner([("stuck", "a", StuckSink("stuck:a"))], max_finals=10,
                            close_timeout_s=0.1)  # fmt: skip
        runner.start()
        await asyncio.sleep(0)
        for k in range(1, 26):  # 1 taken (stuck on it), 10 wait, 14 dropped
            runner.offer(cap(k))
            await asyncio.sleep(0)
        figs = runner.figures()[0]
        assert figs.dropped_queue_full == 14 and figs.waiting == 10
        await runner.aclose()
        return runner

    with caplog.at_level(logging.WARNING, "streamcap.sinks"):
        run(go())
    lines = [r.getMessage() for r in caplog.records]
    full = [m for m in lines if "finals behind" in m]
    assert len(full) == 1  # rate-limited: one line, then a count
    assert "the oldest waiting final (seq 2) is dropped" in full[0]
    assert any("finals not delivered at shutdown" in m for m in lines)


def test_failures_are_logged_without_what_the_sink_said_unless_it_is_safe(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "k3y-Secret-123"

    async def go() -> SinkRunner:
        runner = SinkRunner([("failing", "a", FailingSink(secret))])
        runner.start()
        for k in range(1, 5):
            runner.offer(cap(k))
        await runner.aclose()
        return runner

    with caplog.at_level(logging.DEBUG):
        runner = run(go())
    figs = runner.figures()[0]
    assert figs.failed_finals == 4 and figs.delivered_finals == 0
    text = "\n".join(r.getMessage() + str(r.exc_info) for r in caplog.records)
    assert secret not in text
    assert "caption sink failing:a: a final (seq 1) was not delivered: RuntimeError" in text


def test_captions_offered_before_the_start_wait_for_it() -> None:
    async def go() -> ListSink:
        sink = ListSink()
        runner = SinkRunner([("list", "a", sink)])
        runner.offer(cap(1))
        runner.start()
        await runner.aclose()
        return sink

    assert [c.seq for c in run(go()).got] == [1]
