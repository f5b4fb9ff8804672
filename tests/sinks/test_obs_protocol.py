"""The OBS sink against a stand-in obs-websocket 5 server on loopback: the handshake and its
password, captions as `SendStreamCaption` requests, reconnection, OBS not streaming, and a
password that never reaches a log. Fast: no OBS here (tests/sinks/test_obs_real.py has it).

The stand-in checks the authentication with its own code, written from obs-websocket's
protocol document, not with the sink's `obs_auth`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.server import Server, ServerConnection, serve

from streamcap.core.captions import Caption
from streamcap.sinks import obs
from streamcap.sinks.base import SinkSpec
from streamcap.sinks.obs import ObsSink, check_obs_url, obs_password
from streamcap.sinks.registry import make_sink, sinks_from

PASSWORD = "Pw-obs-7f3Kq9TopSecret"
JFK = (
    "And so, my fellow Americans, ask not what your country can do for you, "
    "ask what you can do for your country."
)


class FakeObs:
    """obs-websocket 5 as far as the sink uses it (Hello, Identify, requests)."""

    def __init__(self, password: str = PASSWORD, streaming: bool = True) -> None:
        self.password = password
        self.streaming = streaming
        self.captions: list[str] = []
        self.identified = 0
        self.refused = 0
        self.hang = False  # accept the socket, never say Hello
        self.drop_after: int | None = None  # close the socket after this many captions
        self.garbage = False  # answer the handshake with what is not obs-websocket
        self.server: Server | None = None
        self.port = 0

    async def start(self, port: int = 0) -> None:
        self.server = await serve(self.handler, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def handler(self, ws: ServerConnection) -> None:
        if self.hang:
            await ws.wait_closed()
            return
        if self.garbage:
            await ws.send("<html>not obs</html>")
            await ws.wait_closed()
            return
        salt, challenge = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        d: dict[str, Any] = {"obsWebSocketVersion": "5.1.0", "rpcVersion": 1}
        if self.password:
            d["authentication"] = {"challenge": challenge, "salt": salt}
        await ws.send(json.dumps({"op": 0, "d": d}))
        ident = json.loads(await ws.recv())
        if self.password:
            sha = hashlib.sha256((self.password + salt).encode()).digest()
            secret = base64.b64encode(sha).decode()
            sha = hashlib.sha256((secret + challenge).encode()).digest()
            if ident["d"].get("authentication") != base64.b64encode(sha).decode():
                self.refused += 1
                await ws.close(4009, "Authentication failed.")
                return
        self.identified += 1
        await ws.send(json.dumps({"op": 2, "d": {"negotiatedRpcVersion": 1}}))
        async for raw in ws:
            req = json.loads(raw)["d"]
            code = 100
            if req["requestType"] == "SendStreamCaption":
                code = 100 if self.streaming else 501
                if self.streaming:
                    self.captions.append(req["requestData"]["captionText"])
            status = {"result": code == 100, "code": code}
            answer = {"requestType": req["requestType"], "requestId": req["requestId"]}
            await ws.send(json.dumps({"op": 7, "d": {**answer, "requestStatus": status}}))
            if self.drop_after is not None and len(self.captions) >= self.drop_after:
                self.drop_after = None
                await ws.close()
                return


def final(seq: int, text: str) -> Caption:
    return Caption("final", "main", seq, seq, text, 0.0, 1.0, len(text), 0.0)


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.02)


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 60))


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(obs, "BACKOFF_S", (0.05, 0.3))
    monkeypatch.setattr(obs, "TIMEOUT_S", 1.0)


def sink_for(url: str, password: str | None = PASSWORD, **options: str) -> ObsSink:
    env = {"STREAMCAP_OBS_PASSWORD_MAIN": password} if password else {}
    return ObsSink(SinkSpec("obs", "main", url, tuple(options.items())), environ=env)


def test_captions_reach_obs_as_608_screens_with_the_password() -> None:
    async def body() -> None:
        fake = FakeObs()
        await fake.start()
        sink = sink_for(fake.url)
        await sink.deliver(final(1, "Ask not what your country can do for you."))
        await until(lambda: len(fake.captions) >= 1)
        await sink.deliver(final(2, "Ask what you can do."))
        await until(lambda: len(fake.captions) >= 2)
        assert fake.captions == [
            "Ask not what your country can do\nfor you.",
            "Ask not what your country can do\nfor you. Ask what you can do.",
        ]
        assert fake.identified == 1 and sink.sent == 2 and sink.failures == 0
        await sink.aclose()
        await fake.stop()

    run(body)


def test_reconnects_after_obs_goes_away_and_skips_to_the_latest_screen() -> None:
    async def body() -> None:
        fake = FakeObs()
        await fake.start()
        sink = sink_for(fake.url, rows="3")
        await sink.deliver(final(1, "one"))
        await until(lambda: fake.captions == ["one"])
        port = fake.port
        await fake.stop()  # OBS quits
        await sink.deliver(final(2, "two " * 30))  # four rows of text while it is away
        await asyncio.sleep(0.5)  # the sink tries, fails, backs off
        assert sink.failures >= 1
        again = FakeObs()
        await again.start(port)  # OBS is back on its port
        await sink.deliver(final(3, "three"))
        await until(lambda: len(again.captions) >= 1)
        rows = again.captions[0].split("\n")
        assert len(rows) <= 3 and rows[-1].endswith("three")  # the latest, not a backlog
        assert again.identified == 1
        await sink.aclose()
        await again.stop()

    run(body)


def test_a_dropped_connection_mid_stream_is_opened_again() -> None:
    async def body() -> None:
        fake = FakeObs()
        fake.drop_after = 1
        await fake.start()
        sink = sink_for(fake.url)
        await sink.deliver(final(1, "before"))
        await until(lambda: len(fake.captions) == 1)
        await asyncio.sleep(0.3)
        await sink.deliver(final(2, "after"))
        await until(lambda: len(fake.captions) == 2)
        assert fake.captions[1].endswith("after") and fake.identified == 2
        await sink.aclose()
        await fake.stop()

    run(body)


def test_not_streaming_is_said_once_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="streamcap.sinks")

    async def body() -> None:
        fake = FakeObs(streaming=False)
        await fake.start()
        sink = sink_for(fake.url)
        for i in range(3):
            await sink.deliver(final(i, f"word{i}"))
            await until(lambda i=i: sink.not_streaming >= i + 1)
        assert fake.captions == [] and sink.sent == 0
        await sink.aclose()
        await fake.stop()

    run(body)
    said = [r for r in caplog.records if "OBS is not streaming" in r.getMessage()]
    assert len(said) == 1


def test_the_password_never_reaches_a_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # websockets' own frame logs too

    async def body() -> None:
        right = FakeObs()
        await right.start()
        sink = sink_for(right.url)
        await sink.deliver(final(1, "hello"))
        await until(lambda: right.captions == ["hello"])
        await sink.aclose()
        await right.stop()
        wrong = FakeObs(password="another")
        await wrong.start()
        sink = sink_for(wrong.url)
        await sink.deliver(final(1, "hello"))
        await until(lambda: wrong.refused >= 1 and sink.failures >= 1)
        await sink.aclose()
        none = sink_for(wrong.url, password=None)
        await none.deliver(final(1, "hello"))
        await until(lambda: none.failures >= 1)
        await none.aclose()
        await wrong.stop()

    run(body)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "OBS refused the password" in text
    assert "OBS asks for a password: set $STREAMCAP_OBS_PASSWORD" in text
    assert PASSWORD not in text and "another" not in text
    assert any(r.name.startswith("websockets") for r in caplog.records)  # they were captured


def test_delivery_never_waits_for_obs() -> None:
    async def body() -> None:
        fake = FakeObs()
        fake.hang = True  # takes the connection and never answers
        await fake.start()
        sink = sink_for(fake.url)
        t0 = time.monotonic()
        for i in range(50):
            await sink.deliver(final(i, f"word {i}"))
        took = time.monotonic() - t0
        await asyncio.sleep(1.5)  # the sink's own task times out on the Hello
        assert sink.failures >= 1
        assert took < obs.TIMEOUT_S  # fifty deliveries in less than one handshake's timeout
        await sink.aclose()
        await fake.stop()

    run(body)


def test_addresses_passwords_and_the_registry() -> None:
    check_obs_url("ws://127.0.0.1:4455")
    check_obs_url("wss://obs.example:4455")
    for bad in ("http://127.0.0.1:4455", "ws://", "ws://u:p@127.0.0.1:4455", "ws://h:99999"):
        with pytest.raises(ValueError) as e:
            check_obs_url(bad)
        assert "p@" not in str(e.value)
    spec = SinkSpec("obs", "show", "ws://127.0.0.1:4455", (("password", "from-file"),))
    assert obs_password(spec, {}) == "from-file"
    assert obs_password(spec, {"STREAMCAP_OBS_PASSWORD_SHOW": "own"}) == "own"
    assert obs_password(SinkSpec("obs", "show", "ws://h:1"), {"STREAMCAP_OBS_PASSWORD": "g"}) == "g"
    assert isinstance(make_sink(spec), ObsSink)
    (made,) = sinks_from(["obs:show=ws://127.0.0.1:4455"], {}, command_line=True)
    assert made.target == "ws://127.0.0.1:4455"  # an address, not a secret: allowed there
    with pytest.raises(ValueError, match="not an OBS websocket address"):
        sinks_from(["obs:show=http://127.0.0.1"], {}, command_line=True)
    with pytest.raises(ValueError, match="rows is 2 or 3"):
        ObsSink(SinkSpec("obs", "show", "ws://127.0.0.1:4455", (("rows", "7"),)))


def test_a_server_that_is_not_obs_is_said_and_retried() -> None:
    async def body() -> None:
        fake = FakeObs()
        fake.garbage = True
        await fake.start()
        sink = sink_for(fake.url)
        await sink.deliver(final(1, "hello"))
        await until(lambda: sink.failures >= 2)  # tried again after the backoff
        assert sink._task is not None and not sink._task.done()  # noqa: SLF001 - still running
        await sink.aclose()
        await fake.stop()

    run(body)


def test_the_last_words_go_out_before_the_sink_closes() -> None:
    async def body() -> None:
        fake = FakeObs()
        await fake.start()
        sink = sink_for(fake.url)
        await sink.deliver(final(1, JFK))  # four rows: two screens, the second paced
        await sink.aclose()
        assert fake.captions and fake.captions[-1].endswith("\nyour country.")
        await fake.stop()

    run(body)
