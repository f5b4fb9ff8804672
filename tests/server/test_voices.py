"""Issue 37, item 4: a voice enrolled over HTTP (`POST /streams/ID/voices?name=Ada`, a WAV file:
what the mic page's "Enrol my voice" sends) names that voice in the stream's captions from its
next final, in the running meeting and in every later session, also after a restart (with
``--record``); and what is refused, with a clear status and one line. A sample replaced
(``&replace=1``) and a voice taken back (``DELETE``) likewise, with the list (``GET``) and the
per-stream count in ``/metrics``.

A real server on loopback, real HTTP and WebSocket clients, real voices (tests/data: the
librivox reader enrolled from one utterance, 0880, heard saying another, 0870; JFK; a Piper
voice) and the real voice labeller with the process's speaker model. The one stand-in is the
speech recogniser: the stream makes a final of every `FINAL_S` seconds it is fed
(`VoiceStream`), and the labeller names it, as it names a real final.
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.parse
import urllib.request
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serverkit import (
    PUB,
    SR,
    START,
    VIEW,
    Collector,
    FakeWorker,
    QuietStream,
    http_get,
    ingest,
)

from streamcap.core.captions import CaptionEvent
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

FINAL_S = 3.5
DATA = Path(__file__).resolve().parents[1] / "data"


class VoiceStream(QuietStream):
    """A stand-in `LiveStream` whose stage is the real `SpeakerLabeller`: every `FINAL_S`
    seconds fed make one final, which the labeller labels by voice."""

    def __init__(self, on_caption: Callable[[CaptionEvent], None], stage: Any) -> None:
        self.on_caption, self.stage = on_caption, stage
        self.fed = self.cut = self.n = 0

    def feed(self, samples: Any) -> None:
        x = np.asarray(samples, np.float32).reshape(-1)
        self.stage.feed(x)
        self.fed += x.size
        step = int(FINAL_S * SR)
        while self.fed - self.cut >= step:
            start = self.cut / SR
            self.cut += step
            ev = CaptionEvent("final", self.n, f"final {self.n}", start, start + FINAL_S)
            for out in self.stage.process(ev):
                self.on_caption(out)
            self.n += 1


@pytest.fixture(scope="module")
def encoder() -> Any:
    from streamcap.errors import UserError
    from streamcap.speakers.registry import default_model, encoder_for

    try:
        return encoder_for(default_model())  # the one the server embeds samples with
    except UserError as e:
        pytest.skip(f"no speaker model installed: {e}")


def clip(name: str) -> np.ndarray:
    with wave.open(str(DATA / f"{name}.wav")) as w:
        assert w.getframerate() == SR and w.getnchannels() == 1
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768


def piece(audio: np.ndarray, start_s: float = 0.0) -> np.ndarray:
    """`FINAL_S` seconds of ``audio`` from ``start_s`` (padded with silence): one final."""
    a = audio[int(start_s * SR) : int((start_s + FINAL_S) * SR)]
    return np.concatenate([a, np.zeros(int(FINAL_S * SR) - a.size, np.float32)])


def wav_bytes(audio: np.ndarray, rate: int = SR, channels: int = 1, width: int = 2) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        pcm = np.clip(audio * 32768, -32768, 32767).astype("<i2")
        w.writeframes(pcm.tobytes() if width == 2 else pcm.astype("<i4").tobytes())
    return buf.getvalue()


def enrol(
    srv: ServerThread,
    stream: str,
    name: str | None,
    body: bytes,
    token: str | None = PUB,
    method: str = "POST",
    origin: str | None = None,
    replace: bool = False,
) -> tuple[int, Any]:
    """`POST /streams/STREAM/voices?name=NAME` with ``body``: (status, JSON or text)."""
    q = "" if name is None else "?" + urllib.parse.urlencode({"name": name})
    q += "&replace=1" if replace else ""
    headers = {"Content-Type": "audio/wav", **({"Origin": origin} if origin else {})}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(
        srv.url(f"/streams/{stream}/voices{q}"), data=body, headers=headers, method=method
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Publisher:
    """One publisher session of ``stream`` (``with``): `say` sends a piece and waits for
    its final."""

    def __init__(self, srv: ServerThread, stream: str, viewer: Collector) -> None:
        self.viewer = viewer
        self._connect = ingest(srv, stream)

    def __enter__(self) -> Publisher:
        self.ws = self._connect.__enter__()
        self.ws.send(json.dumps(START))
        assert json.loads(self.ws.recv(timeout=10))["type"] == "ready"
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        self._connect.__exit__(*exc)

    def say(self, audio: np.ndarray) -> str:
        n = len(self.viewer.finals())
        pcm = np.clip(audio * 32768, -32768, 32767).astype("<i2").tobytes()
        for i in range(0, len(pcm), SR // 5):
            self.ws.send(pcm[i : i + SR // 5])
        assert self.viewer.wait_for(lambda c: len(c.finals()) > n, 30), self.viewer.events
        print("decided:", list(STAGES[-1].records)[-1:])  # shown when the test fails
        return str(self.viewer.finals()[-1]["speaker"])

    def close(self) -> None:
        """Stop, and wait for the server to close (every final out)."""
        self.ws.send(json.dumps({"type": "stop"}))
        for _ in self.ws:  # the server closes once every final is out
            pass


#: every labeller the tests' streams made, newest last (their records explain a failure)
STAGES: list[Any] = []


def serve(record: Path, encoder: Any) -> ServerThread:
    from streamcap.runtime.labeller import SpeakerLabeller

    def factory(stream: str, start: Any, on_caption: Callable[[CaptionEvent], None]) -> Any:
        STAGES.append(SpeakerLabeller(encoder))
        return VoiceStream(on_caption, STAGES[-1])

    config = ServerConfig(  # burst_s None: the pieces come faster than speech
        port=0, admission=False, publish_token=PUB, view_token=VIEW, record_dir=record,
        burst_s=None,
    )  # fmt: skip
    return ServerThread(config, FakeWorker(), stream_factory=factory, speakers="auto").start()


def test_an_enrolled_voice_is_named_from_its_next_final(tmp_path: Path, encoder: Any) -> None:
    jfk, reader, joe = (
        clip("en_real_jfk"),
        clip("en_real_librivox_0870"),
        clip("en_tts_piper_joe_s07"),
    )
    ada_sample = (DATA / "en_real_librivox_0880.wav").read_bytes()  # another utterance of hers
    srv = serve(tmp_path, encoder)
    try:
        viewer = Collector(srv, "meet")
        with Publisher(srv, "meet", viewer) as pub:
            assert pub.say(piece(jfk)) == "Speaker 1"
            # enrolled while the meeting runs, before she speaks: her first final is hers
            status, answer = enrol(srv, "meet", "Ada", ada_sample)
            assert status == 200, answer
            assert (answer["name"], answer["was"], answer["voices"]) == ("Ada", "", ["Ada"])
            assert 2.0 <= answer["speech_s"] <= 3.0
            assert pub.say(piece(reader)) == "Ada"
            # a voice heard before its enrolment: named from its next final; the answer says
            # which label its earlier final keeps
            assert pub.say(piece(joe)) == "Speaker 2"
            joe48k = wav_bytes(np.repeat(joe, 3), 48000)  # any rate: resampled
            status, answer = enrol(srv, "meet", "Joe", joe48k)
            assert (status, answer["was"], answer["voices"]) == (200, "Speaker 2", ["Ada", "Joe"])
            assert pub.say(piece(joe)) == "Joe"
            # a name or a voice the meeting has already: 409
            status, text = enrol(srv, "meet", "Ada", ada_sample)
            assert status == 409 and "Ada is enrolled in meet already" in text, text
            status, text = enrol(srv, "meet", "Bob", ada_sample)
            assert status == 409 and "that voice is Ada's already" in text, text
            assert pub.say(piece(reader, FINAL_S)) == "Ada"
            assert pub.say(piece(jfk, FINAL_S)) == "Speaker 1"
        assert [f["speaker"] for f in viewer.finals()] == [
            "Speaker 1", "Ada", "Speaker 2", "Joe", "Ada", "Speaker 1",
        ]  # fmt: skip
        # the next session's labeller knows both from its start
        with Publisher(srv, "meet", viewer) as pub:
            assert [pub.say(piece(x)) for x in (reader, joe, jfk)] == ["Ada", "Joe", "Speaker 1"]
        viewer.stop()
    finally:
        srv.stop()

    assert json.loads((tmp_path / "meet.voices.json").read_text())["stream"] == "meet"
    srv = serve(tmp_path, encoder)  # a restart: the recording keeps the voices
    try:
        status, _, body = http_get(srv.url(f"/streams/meet/voices?token={VIEW}"))
        doc = json.loads(body)
        assert (status, doc["stream"], doc["voices"]) == (200, "meet", ["Ada", "Joe"])
        assert [v["name"] for v in doc["enrolled"]] == ["Ada", "Joe"]  # with seconds, no embedding
        viewer = Collector(srv, "meet")  # first the recorded finals, replayed
        assert viewer.wait_for(lambda c: len(c.finals()) == 9, 10), viewer.events
        with Publisher(srv, "meet", viewer) as pub:
            assert pub.say(piece(reader, FINAL_S)) == "Ada"
        viewer.stop()
    finally:
        srv.stop()


def test_enrolments_that_are_refused(tmp_path: Path, encoder: Any) -> None:
    reader = clip("en_real_librivox_0870")
    good = wav_bytes(reader)
    srv = serve(tmp_path, encoder)
    try:
        cases: list[tuple[dict[str, Any], int, str]] = [
            ({"token": None}, 403, "missing publish token: enrolling a voice needs it"),
            ({"token": "wrong"}, 403, "wrong publish token"),
            ({"origin": "https://evil.example"}, 403, "origin not allowed"),
            ({"name": None}, 400, "give the voice's name"),
            ({"name": "A<b>"}, 400, "invalid speaker name"),
            ({"name": "Speaker 2"}, 400, "automatic label"),
            ({"body": b""}, 400, "not a WAV file"),
            ({"body": b"hello, this is not audio at all"}, 400, "not a WAV file"),
            ({"body": wav_bytes(reader[:SR])}, 400, "at least 2 s needed"),
            ({"body": wav_bytes(np.zeros(5 * SR, np.float32))}, 400, "0.0 s of sound"),
            ({"body": wav_bytes(np.zeros(31 * SR, np.float32))}, 400, "at most 30 s"),
            ({"body": wav_bytes(reader, channels=1, width=4)}, 400, "send 16-bit PCM"),
            ({"body": bytes(2 << 20)}, 413, "at most 1048576"),
            ({"method": "PUT"}, 405, "use POST"),
        ]
        for change, status, reason in cases:
            kw: dict[str, Any] = {"name": "Ada", "body": good, "token": PUB, **change}
            got, text = enrol(srv, "meet", kw.pop("name"), kw.pop("body"), **kw)
            assert got == status and reason in text, (change, got, text)
            assert str(text).count("\n") == 1, text  # one line
        assert http_get(srv.url("/streams/meet/voices"))[0] == 401  # listing: the view token
        # nothing of that was kept; a good one is, once
        status, answer = enrol(srv, "meet", "Ada", good)
        assert (status, answer["voices"]) == (200, ["Ada"]), answer
        status, text = enrol(srv, "meet", " Ada ", good)  # the name in its normal form
        assert status == 409 and "Ada is enrolled in meet already" in text, text
    finally:
        srv.stop()
    config = ServerConfig(port=0, admission=False, publish_token=PUB)
    with ServerThread(config, FakeWorker()) as off:  # --speakers off: nothing would use it
        status, text = enrol(off, "meet", "Ada", good)
        assert status == 409 and "start it with --speakers auto" in text, text


@pytest.mark.parametrize("allowed", [True, False])
def test_a_sample_body_is_kept_only_for_a_client_that_may_enrol(allowed: bool) -> None:
    """The body of `POST /streams/ID/voices` is kept (up to `MAX_SAMPLE_BYTES`) only when the
    request's headers show it may enrol, decided before a byte of it is read; a stranger's is
    read and dropped as any big body is (and the route answers 403 without it)."""
    from websockets.server import ServerProtocol

    from streamcap.server.http_body import MAX_BODY_BYTES, BodyRequest, read_bodies

    seen: list[str] = []

    def keeps(request: BodyRequest) -> bool:
        seen.append(request.path)
        return allowed

    protocol = ServerProtocol()
    read_bodies(protocol, keeps)
    body = b"\0" * (MAX_BODY_BYTES * 8)
    head = "POST /streams/meet/voices?name=Ada HTTP/1.1\r\nHost: x\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    protocol.receive_data(head.encode() + body)
    (request,) = protocol.events_received()
    assert isinstance(request, BodyRequest) and seen == ["/streams/meet/voices?name=Ada"]
    assert request.body_bytes == len(body)
    assert request.body == (body if allowed else b"")  # the default: nothing kept


def test_a_voice_is_replaced_taken_back_and_listed(tmp_path: Path, encoder: Any) -> None:
    """``&replace=1`` swaps a name's sample, ``DELETE`` takes a voice back (later finals no
    longer get the name, past ones keep it; a restarted server no longer knows it), ``GET``
    lists the names with their seconds of speech, and ``/metrics`` counts them per stream."""
    jfk, reader, joe = (
        clip("en_real_jfk"),
        clip("en_real_librivox_0870"),
        clip("en_tts_piper_joe_s07"),
    )
    wrong, ada_sample = wav_bytes(jfk[: 6 * SR]), (DATA / "en_real_librivox_0880.wav").read_bytes()
    saved = tmp_path / "meet.voices.json"

    def listed(srv: ServerThread) -> tuple[list[Any], list[str]]:
        status, _, body = http_get(srv.url(f"/streams/meet/voices?token={VIEW}"))
        assert status == 200, body
        doc = json.loads(body)
        gauges = [
            x for x in http_get(srv.url("/metrics"))[2].splitlines() if "enrolled_voices{" in x
        ]
        return [(v["name"], v["speech_s"]) for v in doc["enrolled"]], gauges

    srv = serve(tmp_path, encoder)
    try:
        assert enrol(srv, "meet", "Ada", wrong)[0] == 200  # someone else's voice, by mistake
        ((name, first_s),), gauges = listed(srv)
        assert name == "Ada" and 4.0 <= first_s <= 6.0, first_s  # the first 6 s of JFK's
        assert gauges == ['streamcap_enrolled_voices{stream="meet"} 1.0']
        viewer = Collector(srv, "meet")
        with Publisher(srv, "meet", viewer) as pub:
            assert pub.say(piece(jfk)) == "Ada"
            status, text = enrol(srv, "meet", "Ada", ada_sample)
            assert status == 409 and "add &replace=1" in text, text
            status, answer = enrol(srv, "meet", "Ada", ada_sample, replace=True)
            assert (status, answer["was"], answer["voices"]) == (200, "", ["Ada"]), answer
            assert [pub.say(piece(x)) for x in (reader, jfk)] == ["Ada", "Speaker 1"]
            assert pub.say(piece(joe)) == "Speaker 2"
            status, answer = enrol(srv, "meet", "Joe", wav_bytes(joe))
            assert (status, answer["was"]) == (200, "Speaker 2"), answer
            assert pub.say(piece(joe)) == "Joe"
            enrolled, gauges = listed(srv)
            assert [n for n, _ in enrolled] == ["Ada", "Joe"] and 2.0 <= enrolled[0][1] <= 3.0
            assert gauges == ['streamcap_enrolled_voices{stream="meet"} 2.0']
            assert [v["name"] for v in json.loads(saved.read_text())["voices"]] == ["Ada", "Joe"]
            # taken back: refused first, one line each
            for change, code, reason in [
                ({"token": None}, 403, "missing publish token: taking a voice back needs it"),
                ({"origin": "https://evil.example"}, 403, "origin not allowed"),
                ({"name": "Speaker 1"}, 400, "automatic label"),
                ({"name": "Nobody"}, 404, "Nobody is not enrolled in meet"),
            ]:
                kw: dict[str, Any] = {"name": "Joe", "token": PUB, **change}
                got, text = enrol(srv, "meet", kw.pop("name"), b"", method="DELETE", **kw)
                assert got == code and reason in text and text.count("\n") == 1, (change, text)
            status, answer = enrol(srv, "meet", "Joe", b"", method="DELETE")
            assert (status, answer["now"], answer["voices"]) == (200, "Speaker 2", ["Ada"])
            assert [v["name"] for v in json.loads(saved.read_text())["voices"]] == ["Ada"]
            assert pub.say(piece(joe)) == "Speaker 2"  # its number again
            status, answer = enrol(srv, "meet", "Ada", b"", method="DELETE")
            assert (status, answer["now"], answer["voices"]) == (200, "", [])
            assert pub.say(piece(reader, FINAL_S)) == "Speaker 3"  # a voice not heard yet
        past = ["Ada", "Ada", "Speaker 1", "Speaker 2", "Joe", "Speaker 2", "Speaker 3"]
        assert [f["speaker"] for f in viewer.finals()] == past  # each keeps the name it got
        viewer.stop()
        assert enrol(srv, "meet", "Ada", b"", method="DELETE")[0] == 404
        assert listed(srv) == ([], [])
    finally:
        srv.stop()
    assert not saved.exists()
    srv = serve(tmp_path, encoder)  # a restart: the voices taken back stay gone
    try:
        assert listed(srv) == ([], [])
    finally:
        srv.stop()
