"""The sans-I/O wire protocol, driven with literal messages and a clock we pass in."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from streamcap.server.close import CloseCode, ProtocolError
from streamcap.server.protocol import (
    DEFAULT_BURST_S,
    IngestPhase,
    IngestState,
    StartMessage,
    StopMessage,
    decode_pcm,
    error_message,
    parse_control,
    parse_start,
    ready_message,
)
from streamcap.server.request import check_token, extract_token, parse_ws_path

START = '{"type":"start","sample_rate":16000,"format":"pcm_s16le","channels":1,"language":null}'


@contextmanager
def raises(code: int, match: str) -> Iterator[None]:
    """pytest.raises for a ProtocolError with this close code and a reason matching `match`."""
    with pytest.raises(ProtocolError, match=match) as info:
        yield
    assert info.value.code == code, info.value


def s16(values: list[int]) -> bytes:
    return np.array(values, dtype="<i2").tobytes()


# ----------------------------------------------------------------------------- close codes


def test_close_codes() -> None:
    assert [int(c) for c in CloseCode] == [1000, 1001, 1003, 1008, 1009, 1011, 1013]
    e = ProtocolError(CloseCode.POLICY_VIOLATION, "nope")
    assert (e.code, e.reason, str(e)) == (1008, "nope", "1008: nope")
    assert e.close_reason == "nope"


def test_close_reason_fits_a_close_frame() -> None:
    e = ProtocolError(1003, "é" * 100)  # 200 bytes of UTF-8
    raw = e.close_reason.encode("utf-8")
    assert len(raw) <= 123 and e.close_reason.endswith("...")
    assert e.reason == "é" * 100  # the full reason stays for logs


# ----------------------------------------------------------------------------- start


def test_parse_start_full_and_defaults() -> None:
    assert parse_start(START) == StartMessage(16000, "pcm_s16le", 1, None, "transcribe")
    msg = parse_start(
        json.dumps(
            {
                "type": "start",
                "sample_rate": 48000,
                "format": "f32le",
                "channels": 2,
                "language": "EN",
                "task": "translate",
            }
        )
    )
    assert msg == StartMessage(48000, "f32le", 2, "en", "translate")
    assert parse_start('{"type":"start","sample_rate":8000,"format":"f32le"}').channels == 1


def test_parse_start_prompt_vocabulary_and_speaker() -> None:
    base = {"type": "start", "sample_rate": 16000, "format": "f32le"}
    msg = parse_start(json.dumps({**base, "prompt": " A  talk\n", "vocabulary": ["gRPC", " Nguyen"],
                                  "speaker": "  Zoë   Ōta "}))  # fmt: skip
    assert (msg.prompt, msg.speaker) == ("A talk gRPC, Nguyen.", "Zoë Ōta")
    one = parse_start(json.dumps({**base, "vocabulary": "Kubernetes; kubernetes, K8s"}))
    assert one.prompt == "Kubernetes, K8s." and one.speaker == ""
    assert parse_start(json.dumps(base)).prompt == ""
    assert parse_start(json.dumps({**base, "speakers": "auto"})).speakers == "auto"
    assert parse_start(json.dumps(base)).speakers is None  # the server's choice


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"prompt": 5}, "'prompt' must be a string"),
        ({"vocabulary": {"a": 1}}, "'vocabulary' must be a list"),
        ({"vocabulary": ["ok", 3]}, "terms must be strings"),
        ({"vocabulary": ["x" * 65]}, "over 64"),
        ({"vocabulary": [f"t{i}" for i in range(101)]}, "at most 100"),
        ({"prompt": "y" * 1001}, "at most 1000"),
        ({"prompt": "bell\x07"}, "control characters"),
        ({"speaker": "<b>Eve</b>"}, "invalid speaker name"),
        ({"speaker": "   "}, "invalid speaker name"),
        ({"speaker": "n" * 33}, "invalid speaker name"),
        ({"speaker": 7}, "'speaker' must be a string"),
        ({"speakers": "maybe"}, "unsupported speakers 'maybe'"),
    ],
)
def test_parse_start_refuses_bad_prompts_and_names(fields: dict, match: str) -> None:
    base = {"type": "start", "sample_rate": 16000, "format": "f32le"}
    with raises(CloseCode.UNSUPPORTED_DATA, match):
        parse_start(json.dumps({**base, **fields}))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{nope", r"start message is not valid JSON \(.* at position 1\)"),
        ("[" * 100_000, "not valid JSON|nested too deeply"),
        ('["start"]', "must be a JSON object, got list"),
        ('{"type":"stop"}', "expected .*start.* as the first message, got type 'stop'"),
        ('{"sample_rate":16000}', "got type None"),
        ('{"type":"start","format":"f32le"}', "missing 'sample_rate'"),
        ('{"type":"start","sample_rate":16000}', "missing 'format'"),
        ('{"type":"start","sample_rate":"16000","format":"f32le"}', "must be an integer"),
        ('{"type":"start","sample_rate":16000.0,"format":"f32le"}', "must be an integer"),
        ('{"type":"start","sample_rate":true,"format":"f32le"}', "must be an integer"),
        ('{"type":"start","sample_rate":96000,"format":"f32le"}', r"unsupported sample_rate 96000"),
        ('{"type":"start","sample_rate":7999,"format":"f32le"}', r"must be 8000\.\.48000 Hz"),
        ('{"type":"start","sample_rate":16000,"format":"mp3"}', "unsupported format 'mp3'"),
        ('{"type":"start","sample_rate":16000,"format":"f32le","channels":6}', "channels 6"),
        ('{"type":"start","sample_rate":16000,"format":"f32le","channels":"1"}', "channels '1'"),
        ('{"type":"start","sample_rate":16000,"format":"f32le","language":5}', "'language'"),
        ('{"type":"start","sample_rate":16000,"format":"f32le","language":"e"}', "'language'"),
        ('{"type":"start","sample_rate":16000,"format":"f32le","task":"sing"}', "task 'sing'"),
        (
            '{"type":"start","sample_rate":16000,"format":"f32le","langauge":"en","x":1}',
            "unknown field.*: langauge, x",
        ),
    ],
)
def test_parse_start_errors(text: str, match: str) -> None:
    with raises(CloseCode.UNSUPPORTED_DATA, match):
        parse_start(text)


# ----------------------------------------------------------------------------- control


def test_parse_control() -> None:
    assert parse_control('{"type":"stop"}') == StopMessage()
    with raises(1003, "duplicate start message"):
        parse_control(START)
    with raises(1003, "unknown message type 'pause'"):
        parse_control('{"type":"pause"}')
    with raises(1003, "control message is not valid JSON"):
        parse_control("stop")
    with raises(1003, "control message must be a JSON object, got str"):
        parse_control('"stop"')


# ----------------------------------------------------------------------------- PCM


def test_decode_pcm_s16_and_f32() -> None:
    out = decode_pcm(s16([0, 16384, -32768, 32767]), "pcm_s16le", 1)
    assert out.dtype == np.float32 and out.ndim == 1
    np.testing.assert_allclose(out, [0.0, 0.5, -1.0, 32767 / 32768])
    f = np.array([0.25, -2.0, 0.5], dtype="<f4").tobytes()
    np.testing.assert_allclose(decode_pcm(f, "f32le"), [0.25, -1.0, 0.5])  # clipped
    assert decode_pcm(b"", "f32le").shape == (0,)


def test_decode_pcm_stereo_downmix() -> None:
    out = decode_pcm(s16([16384, 0, -16384, -16384]), "pcm_s16le", 2)
    np.testing.assert_allclose(out, [0.25, -0.5])


def test_decode_pcm_errors() -> None:
    with raises(1003, "bad audio frame: 3 bytes is not a whole number"):
        decode_pcm(b"\x00\x01\x02", "pcm_s16le", 1)
    with raises(1003, "bad audio frame: 6 bytes"):
        decode_pcm(b"\x00" * 6, "pcm_s16le", 2)  # 1.5 stereo frames
    with raises(1003, "unknown PCM format 'mulaw'"):
        decode_pcm(b"\x00\x00", "mulaw", 1)
    with raises(1003, "unsupported channels 3"):
        decode_pcm(b"\x00" * 6, "pcm_s16le", 3)
    with raises(CloseCode.MESSAGE_TOO_BIG, "1001 bytes exceeds the limit of 1000 bytes"):
        decode_pcm(b"\x00" * 1001, "pcm_s16le", 1, max_bytes=1000)
    assert decode_pcm(b"\x00" * 1000, "pcm_s16le", 1, max_bytes=1000).size == 500


def test_decode_pcm_never_passes_non_finite_values() -> None:
    f = np.array([np.nan, np.inf, 0.5], dtype="<f4").tobytes()
    out = decode_pcm(f, "f32le")
    assert np.isfinite(out).all() and out[2] == 0.5


# ----------------------------------------------------------------------------- ingest state


def test_ingest_happy_path() -> None:
    st = IngestState()
    assert st.phase is IngestPhase.AWAITING_START and st.audio_seconds == 0.0
    start = st.receive_text(START)
    assert isinstance(start, StartMessage) and st.start == start
    assert st.phase is IngestPhase.STREAMING and st.phase == "streaming"
    audio = st.receive_bytes(s16([0] * 1600), now=100.0)
    assert audio.shape == (1600,)
    assert st.samples_received == 1600 and st.audio_seconds == pytest.approx(0.1)
    assert st.receive_text('{"type":"stop"}') == StopMessage()
    assert st.phase is IngestPhase.STOPPED


def test_ingest_order_errors() -> None:
    st = IngestState()
    with raises(1003, "audio frame received before the start message"):
        st.receive_bytes(s16([0, 0]), now=0.0)
    with raises(1003, "expected .* as the first message"):
        st.receive_text('{"type":"stop"}')
    assert st.phase is IngestPhase.AWAITING_START
    st.receive_text(START)
    with raises(1003, "duplicate start message"):
        st.receive_text(START)
    st.receive_text('{"type":"stop"}')
    with raises(1003, "audio frame received after stop"):
        st.receive_bytes(s16([0, 0]), now=1.0)
    with raises(1003, "text message received after stop"):
        st.receive_text('{"type":"stop"}')


def test_ingest_frame_limits_come_from_state() -> None:
    st = IngestState(max_frame_bytes=64)
    st.receive_text(START)
    with raises(1009, "exceeds the limit of 64 bytes"):
        st.receive_bytes(b"\x00" * 66, now=0.0)
    with raises(1003, "not a whole number"):
        st.receive_bytes(b"\x00", now=0.0)
    assert st.samples_received == 0


def test_flood_allows_real_time_and_a_burst() -> None:
    st = IngestState()  # 5 s burst
    st.receive_text(START)
    second = s16([0] * 16000)
    # A real-time client: one second of audio per second, for a long time.
    for i in range(600):
        st.receive_bytes(second, now=1000.0 + i)
    # A client catching up after a stall: burst up to the allowance at once.
    st2 = IngestState()
    st2.receive_text(START)
    for _ in range(int(DEFAULT_BURST_S)):
        st2.receive_bytes(second, now=5.0)
    with raises(CloseCode.POLICY_VIOLATION, "audio arriving faster than real time"):
        st2.receive_bytes(second, now=5.5)  # 6 s of audio after 0.5 s of wall time
    assert st2.samples_received == 5 * 16000  # the refused frame is not counted
    st2.receive_bytes(second, now=6.0)  # and after a second the allowance has grown


def test_flood_clock_going_backwards_and_guard_off() -> None:
    st = IngestState(burst_s=1.0)
    st.receive_text(START)
    st.receive_bytes(s16([0] * 16000), now=10.0)
    with raises(1008, r"faster than real time \(2\.0 s ahead, limit 1 s\)"):
        st.receive_bytes(s16([0] * 16000), now=9.0)  # a clock before the first frame: 0 elapsed
    bulk = IngestState(burst_s=None)
    bulk.receive_text(START)
    for _ in range(100):
        bulk.receive_bytes(s16([0] * 16000), now=0.0)
    assert bulk.audio_seconds == 100.0


# ----------------------------------------------------------------------------- paths & tokens


def test_parse_ws_path_routes() -> None:
    assert parse_ws_path("/ingest?stream=room-1.a_B&token=T") == (
        "ingest",
        {"stream": "room-1.a_B", "token": "T"},
    )
    assert parse_ws_path("/captions?stream=s") == ("captions", {"stream": "s", "since": "0"})
    assert parse_ws_path("/captions/?stream=s&since=007&token=&v=2") == (
        "captions",
        {"stream": "s", "since": "7", "token": "", "v": "2"},
    )
    assert parse_ws_path("/ingest?stream=" + "x" * 64)[1]["stream"] == "x" * 64
    assert parse_ws_path("/ingest?stream=s&since=abc")[1]["since"] == "abc"  # unused on ingest


@pytest.mark.parametrize(
    ("path", "code", "match"),
    [
        ("/", 1008, "unknown path '/': use /ingest or /captions"),
        ("/ingestx?stream=s", 1008, "unknown path"),
        ("/ingest", 1008, "missing 'stream'"),
        ("/ingest?stream=", 1008, "invalid stream id ''"),
        ("/ingest?stream=" + "x" * 65, 1008, "invalid stream id"),
        ("/ingest?stream=a/b", 1008, "invalid stream id 'a/b'"),
        ("/ingest?stream=caf%C3%A9", 1008, "invalid stream id"),
        ("/ingest?stream=a&stream=b", 1008, "'stream' given more than once"),
        ("/captions?stream=s&since=-1", 1003, "'since' must be a non-negative integer, got '-1'"),
        ("/captions?stream=s&since=1.5", 1003, "non-negative integer"),
        ("/captions?stream=s&since=", 1003, "non-negative integer"),
        ("/captions?stream=s&since=" + "9" * 19, 1003, "non-negative integer"),
        ("/captions?stream=s&since=%C2%B2", 1003, "non-negative integer"),  # unicode digit
    ],
)
def test_parse_ws_path_errors(path: str, code: int, match: str) -> None:
    with raises(code, match):
        parse_ws_path(path)


def test_extract_token() -> None:
    no_headers: dict[str, str] = {}
    assert extract_token({"token": "q"}, {"Authorization": "Bearer h"}.get) == "q"
    assert extract_token({}, {"Authorization": "Bearer h"}.get) == "h"
    assert extract_token({}, {"Authorization": "  bearer   h x "}.get) == "h x"
    assert extract_token({}, {"Authorization": "Basic dXNlcg=="}.get) is None
    assert extract_token({}, {"Authorization": "Bearer  "}.get) is None
    assert extract_token({}, no_headers.get) is None
    assert extract_token({"token": ""}, no_headers.get) == ""


def test_check_token() -> None:
    assert check_token(None, None) and check_token(None, "anything")
    assert check_token("s3cret", "s3cret")
    assert not check_token("s3cret", None)
    assert not check_token("s3cret", "")
    assert not check_token("s3cret", "s3cre")
    assert check_token("clé", "clé") and not check_token("clé", "cle")  # non-ASCII is fine


def test_messages() -> None:
    assert json.loads(ready_message("room", 48000)) == {
        "type": "ready",
        "stream": "room",
        "sample_rate": 48000,
    }
    assert json.loads(error_message(CloseCode.MESSAGE_TOO_BIG, "too big")) == {
        "type": "error",
        "code": 1009,
        "reason": "too big",
    }


# ----------------------------------------------------------------------------- hardening


def test_an_integer_too_long_to_read_is_bad_data_not_a_crash() -> None:
    # Python refuses to parse integers of more than 4300 digits (ValueError, not JSONDecodeError).
    huge = '{"type":"start","sample_rate":' + "9" * 5000 + ',"format":"pcm_s16le"}'
    with raises(CloseCode.UNSUPPORTED_DATA, "cannot be read"):
        parse_start(huge)
    st = IngestState()
    st.receive_text(START)
    with raises(CloseCode.UNSUPPORTED_DATA, "cannot be read"):
        st.receive_text('{"type":"stop","x":' + "1" * 5000 + "}")


@pytest.mark.parametrize("stream", [".hidden", "..", ".", ".x.jsonl"])
def test_stream_ids_starting_with_a_dot_are_refused(stream: str) -> None:
    with raises(CloseCode.POLICY_VIOLATION, "invalid stream id"):
        parse_ws_path(f"/ingest?stream={stream}")
    with raises(CloseCode.POLICY_VIOLATION, "invalid stream id"):
        parse_ws_path(f"/captions?stream={stream}")


def test_ids_with_inner_dots_still_work_and_epoch_is_validated() -> None:
    assert parse_ws_path("/ingest?stream=a.b-c_d")[1]["stream"] == "a.b-c_d"
    _, params = parse_ws_path("/captions?stream=s&since=4&epoch=ab12cd34ef56")
    assert params["epoch"] == "ab12cd34ef56" and params["since"] == "4"
    assert "epoch" not in parse_ws_path("/captions?stream=s")[1]
    with raises(CloseCode.UNSUPPORTED_DATA, "'epoch' must be"):
        parse_ws_path("/captions?stream=s&epoch=" + "x" * 40)
    with raises(CloseCode.UNSUPPORTED_DATA, "'epoch' must be"):
        parse_ws_path("/captions?stream=s&epoch=a%20b")


def test_resume_cursor_rule() -> None:
    from streamcap.server.request import resume_cursor

    assert resume_cursor(5, None, "e1", 9) == 5  # same log, no epoch given: trusted
    assert resume_cursor(5, "e1", "e1", 9) == 5  # same log
    assert resume_cursor(9, "e1", "e1", 9) == 9  # up to date
    assert resume_cursor(5, "e0", "e1", 9) == 0  # another log: all of this one
    assert resume_cursor(12, None, "e1", 9) == 0  # beyond the end: cannot be from this log
    assert resume_cursor(12, "e1", "e1", 9) == 0
    assert resume_cursor(3, "", "e1", 9) == 3  # an empty epoch counts as none


def test_message_rate_limit_counts_empty_frames() -> None:
    st = IngestState(max_frame_rate=100, frame_burst=200)
    st.receive_text(START, now=0.0)
    # A real client: 10 frames of 100 ms a second, for ten minutes.
    for i in range(6000):
        st.receive_bytes(s16([0] * 1600), now=i / 10)
    # A flood of empty frames: the burst allowance, then 1008 although no audio arrives.
    flood = IngestState(max_frame_rate=100, frame_burst=200)
    flood.receive_text(START, now=0.0)
    with raises(CloseCode.POLICY_VIOLATION, "too many messages: limit 100 per second"):
        for _ in range(1_000_000):
            flood.receive_bytes(b"", now=1.0)
    assert 200 <= flood.messages <= 302
    # One-sample frames at real-time pace (16,000 a second) are a flood too.
    tiny = IngestState(max_frame_rate=100, frame_burst=200)
    tiny.receive_text(START, now=0.0)
    with raises(CloseCode.POLICY_VIOLATION, "too many messages"):
        for i in range(16000):
            tiny.receive_bytes(s16([0]), now=i / 16000)
    # The limit can be turned off (trusted bulk uploads).
    off = IngestState(max_frame_rate=None, burst_s=None)
    off.receive_text(START)
    for _ in range(10_000):
        off.receive_bytes(b"", now=0.0)
