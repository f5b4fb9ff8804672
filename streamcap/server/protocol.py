"""Sans-I/O wire protocol: parse and validate what clients send, build what we answer.

No sockets and no clock here (the caller passes `now`), in the style of the `websockets`
library's protocol layer, so every rule is tested without a network. See docs/design.md,
"The protocol's shape".
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from streamcap.audio.pcm import SAMPLE_BYTES, PcmFormat, pcm_to_float
from streamcap.core.constants import MIN_SAMPLE_RATE  # one floor: clients, files, microphones
from streamcap.core.prompting import parse_vocabulary, stream_prompt

from .bucket import TokenBucket
from .client_text import check_strings, check_text, parse_speaker
from .close import CloseCode, ProtocolError
from .close import bad_data as _bad

# The request's own rules are `request`'s; re-exported: the protocol's public names.

Task = Literal["transcribe", "translate"]

MAX_SAMPLE_RATE = 48000
#: 1 MiB: about 2.7 s of 48 kHz stereo f32le; real clients send 20-250 ms per frame.
DEFAULT_MAX_FRAME_BYTES = 1 << 20
#: Audio a client may be ahead of real time (network catch-up) before it counts as a flood.
DEFAULT_BURST_S = 5.0
#: Messages per second a publisher may send on average (real clients: 4-50 frames of 20-250 ms);
#: empty frames count too, so a client cannot burn a core with a million of them.
DEFAULT_MAX_FRAME_RATE = 100.0
#: Messages a publisher may send in a burst above that rate (network catch-up).
DEFAULT_FRAME_BURST = 200

_LANGUAGE_RE = re.compile(r"[A-Za-z][A-Za-z_-]{1,31}")
_START_FIELDS = frozenset(
    {"type", "sample_rate", "format", "channels", "language", "task", "prompt", "vocabulary",
     "speaker", "speakers"}
)  # fmt: skip


@dataclass(frozen=True)
class StartMessage:
    """The validated first ingest message. `channels` 2 means interleaved, averaged to mono."""

    sample_rate: int
    format: PcmFormat
    channels: int = 1
    language: str | None = None
    task: Task = "transcribe"
    #: the stream's own prompt (`core.prompting.stream_prompt` of `prompt` and `vocabulary`)
    prompt: str = ""
    #: the publisher's name in its room ("" when not given)
    speaker: str = ""
    #: voice labels for this stream: "auto", "off", or None for the server's `--speakers`
    speakers: str | None = None


@dataclass(frozen=True)
class StopMessage:
    """The client has no more audio: finalise what is open, then close normally."""


def _load_object(text: str, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise _bad(f"{what} is not valid JSON ({e.msg} at position {e.pos})") from None
    except RecursionError:  # absurdly nested input
        raise _bad(f"{what} is nested too deeply") from None
    except ValueError as e:  # e.g. an integer beyond Python's int-digit limit
        raise _bad(f"{what} holds a value that cannot be read ({str(e)[:60]})") from None
    if not isinstance(obj, dict):
        raise _bad(f"{what} must be a JSON object, got {type(obj).__name__}")
    try:
        check_strings(obj, what)
    except RecursionError:
        raise _bad(f"{what} is nested too deeply") from None
    return obj


def _one_of(v: object, options: Collection[str]) -> bool:
    """`v` is one of the strings `options` (a list or an object is not: never unhashable)."""
    return isinstance(v, str) and v in options


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_start(text: str) -> StartMessage:
    """Validate the first ingest text message.

    Required: `type` "start", `sample_rate` (int, 8000..48000), `format` ("pcm_s16le" or
    "f32le"). Optional: `channels` (1 or 2, default 1), `language` (code,
    null = detect once and keep, "auto-each" = detect per utterance),
    `task` ("transcribe" or "translate"), `prompt` (text) and `vocabulary` (terms: a list, or
    one comma-separated string) for the stream's own prompt, `speaker` (the publisher's name
    in its room, as the `speaker` query parameter), `speakers` ("auto": label finals by voice,
    "off"; default: the server's). Unknown fields are rejected so that a
    typo such as "langauge" fails loudly instead of silently auto-detecting.
    """
    msg = _load_object(text, "start message")
    kind = msg.get("type")
    if kind != "start":
        raise _bad(f'expected {{"type":"start",...}} as the first message, got type {kind!r}')
    unknown = sorted(set(msg) - _START_FIELDS)
    if unknown:
        raise _bad(f"start message has unknown field(s): {', '.join(unknown)}")

    for field in ("sample_rate", "format"):
        if field not in msg:
            raise _bad(f"start message is missing {field!r}")
    rate = msg["sample_rate"]
    if not _is_int(rate):
        raise _bad(f"'sample_rate' must be an integer, got {rate!r}")
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise _bad(
            f"unsupported sample_rate {rate}: must be {MIN_SAMPLE_RATE}..{MAX_SAMPLE_RATE} Hz"
        )
    fmt = msg["format"]
    if not _one_of(fmt, SAMPLE_BYTES):
        raise _bad(f"unsupported format {fmt!r}: use 'pcm_s16le' or 'f32le'")

    channels = msg.get("channels", 1)
    if not _is_int(channels) or channels not in (1, 2):
        raise _bad(f"unsupported channels {channels!r}: use 1 (mono) or 2 (stereo, interleaved)")

    language = msg.get("language")
    if language == "auto-each":  # detect in every utterance (`core.live_config.AUTO_EACH`)
        pass
    elif language is not None:
        if not isinstance(language, str) or not _LANGUAGE_RE.fullmatch(language):
            raise _bad(f"'language' must be a language code such as 'en' or null, got {language!r}")
        language = language.lower()

    task = msg.get("task", "transcribe")
    if not _one_of(task, ("transcribe", "translate")):
        raise _bad(f"unsupported task {task!r}: use 'transcribe' or 'translate'")

    prompt = msg.get("prompt", "")
    if not isinstance(prompt, str):
        raise _bad(f"'prompt' must be a string, got {type(prompt).__name__}")
    prompt = check_text(prompt, "'prompt'", spaces=True)
    vocabulary = msg.get("vocabulary", [])
    if isinstance(vocabulary, str):
        vocabulary = check_text(vocabulary, "'vocabulary'", spaces=True)
    elif isinstance(vocabulary, list):  # terms that are not strings: `parse_vocabulary` says
        vocabulary = [
            check_text(v, "'vocabulary'", spaces=True) if isinstance(v, str) else v
            for v in vocabulary
        ]
    else:
        raise _bad("'vocabulary' must be a list of strings or one comma-separated string")
    try:
        prompt = stream_prompt(prompt, parse_vocabulary(vocabulary))
    except ValueError as e:
        raise _bad(str(e)) from None
    speaker = parse_speaker(msg["speaker"]) if msg.get("speaker") is not None else ""
    speakers = msg.get("speakers")
    if speakers is not None and speakers not in ("auto", "off"):
        raise _bad(f"unsupported speakers {speakers!r}: use 'auto' (voice labels) or 'off'")
    return StartMessage(
        sample_rate=rate, format=fmt, channels=channels, language=language, task=task,
        prompt=prompt, speaker=speaker, speakers=speakers,
    )  # fmt: skip


def parse_control(text: str) -> StopMessage:
    """Validate a text message after the start (only `{"type":"stop"}` exists today)."""
    msg = _load_object(text, "control message")
    kind = msg.get("type")
    if kind == "stop":
        return StopMessage()
    if kind == "start":
        raise _bad("duplicate start message: this stream has already started")
    raise _bad(f"unknown message type {kind!r}: only 'stop' may follow the start")


def decode_pcm(
    data: bytes, fmt: str, channels: int = 1, *, max_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> np.ndarray:
    """One binary frame to mono float32 in [-1, 1] at the client's rate.

    Frames must hold whole sample frames (every channel): we never reassemble a sample torn
    across two messages. Decoding itself (NaN/inf sanitised, clipping) is `audio.pcm`'s.
    """
    if len(data) > max_bytes:
        raise ProtocolError(
            CloseCode.MESSAGE_TOO_BIG,
            f"audio frame of {len(data)} bytes exceeds the limit of {max_bytes} bytes",
        )
    if channels not in (1, 2):
        raise _bad(f"unsupported channels {channels!r}: use 1 or 2")
    try:
        return pcm_to_float(data, fmt, channels)
    except ValueError as e:  # unknown format, torn frame
        raise _bad(f"bad audio frame: {e}") from None


class IngestPhase(str, enum.Enum):
    AWAITING_START = "awaiting_start"
    STREAMING = "streaming"
    STOPPED = "stopped"


class IngestState:
    """State machine of one ingest connection: awaiting_start -> streaming -> stopped.

    Also the flood guard: audio may run at most `burst_s` seconds ahead of the wall clock
    counted from the first audio frame (`None` turns the guard off, e.g. for trusted bulk
    uploads). The caller passes `now` (monotonic seconds), so tests need no sleeping.
    """

    def __init__(
        self,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        burst_s: float | None = DEFAULT_BURST_S,
        max_frame_rate: float | None = DEFAULT_MAX_FRAME_RATE,
        frame_burst: int = DEFAULT_FRAME_BURST,
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.burst_s = burst_s
        self.max_frame_rate = max_frame_rate
        self.frame_burst = frame_burst
        self.phase = IngestPhase.AWAITING_START
        self.start: StartMessage | None = None
        self.samples_received = 0
        self.messages = 0
        self._t0: float | None = None
        # messages: `frame_burst` deep, refilled at `max_frame_rate` per second
        self._bucket = (
            TokenBucket(max_frame_rate, float(frame_burst)) if max_frame_rate is not None else None
        )
        #: seconds of audio, shared by every publisher from one client address (`share_audio`)
        self._address_audio: TokenBucket | None = None

    def share_audio(self, bucket: TokenBucket) -> None:
        """This connection's audio also spends `bucket`, one per client address (seconds of
        audio, refilled at the address's real time): the per-connection guard starts afresh on
        every connection, so a client that resets and reconnects would otherwise push a new
        `burst_s` of audio each time (red-team round 4, ISO-RECONNECT)."""
        self._address_audio = bucket

    def receive_control(self, now: float) -> None:
        """A ping or pong frame: it counts against the message rate like any message, so a
        ping flood closes 1008 as a data flood does (websockets answers the pings itself)."""
        self._count_message(now)

    def _count_message(self, now: float) -> None:
        """Every message (text, audio, empty) takes a token; none left is a flood (1008)."""
        self.messages += 1
        if self._bucket is not None and not self._bucket.take(1.0, now):
            raise ProtocolError(
                CloseCode.POLICY_VIOLATION,
                f"too many messages: limit {self._bucket.rate:g} per second "
                "(send 20-250 ms of audio a frame)",
            )

    @property
    def audio_seconds(self) -> float:
        """Audio received so far, in seconds of the client's stream."""
        if self.start is None:
            return 0.0
        return self.samples_received / self.start.sample_rate

    def receive_text(self, text: str, now: float = 0.0) -> StartMessage | StopMessage:
        """Returns the start (first message) or the stop; ProtocolError otherwise."""
        self._count_message(now)
        if self.phase is IngestPhase.AWAITING_START:
            self.start = parse_start(text)
            self.phase = IngestPhase.STREAMING
            return self.start
        if self.phase is IngestPhase.STREAMING:
            msg = parse_control(text)
            self.phase = IngestPhase.STOPPED
            return msg
        raise _bad("text message received after stop")

    def receive_bytes(self, data: bytes, now: float) -> np.ndarray:
        """Returns the frame's mono float32 samples at `start.sample_rate`."""
        self._count_message(now)
        if self.phase is IngestPhase.AWAITING_START:
            raise _bad('audio frame received before the start message: send {"type":"start",...}')
        if self.phase is IngestPhase.STOPPED:
            raise _bad("audio frame received after stop")
        assert self.start is not None
        samples = decode_pcm(
            data, self.start.format, self.start.channels, max_bytes=self.max_frame_bytes
        )
        if self._t0 is None:
            self._t0 = now
        total = self.samples_received + len(samples)
        if self.burst_s is not None:
            ahead = total / self.start.sample_rate - max(0.0, now - self._t0)
            if ahead > self.burst_s:
                raise ProtocolError(
                    CloseCode.POLICY_VIOLATION,
                    f"audio arriving faster than real time ({ahead:.1f} s ahead, "
                    f"limit {self.burst_s:g} s)",
                )
        shared = self._address_audio
        if shared is not None and not shared.take(len(samples) / self.start.sample_rate, now):
            raise ProtocolError(
                CloseCode.POLICY_VIOLATION,
                "audio arriving faster than real time across this address's connections "
                f"(limit {shared.rate:g} s of audio a second, {shared.burst:g} s ahead)",
            )
        self.samples_received = total
        return samples


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def ready_message(stream: str, sample_rate: int, time: float | None = None, epoch: str = "") -> str:
    """Answer to a valid start: the client may now send audio. `time`: the stream time where
    this connection's audio begins (where the stream's finals end after a restart from
    `--record`, where the audio received ends after a dropped connection) and `epoch`: the
    stream's log, so a publisher that reconnects knows what to send again (`streamcap
    publish`)."""
    msg: dict[str, Any] = {"type": "ready", "stream": stream, "sample_rate": sample_rate}
    if time is not None:
        msg["time"] = round(time, 6)
    if epoch:
        msg["epoch"] = epoch
    return _dumps(msg)


def error_message(code: int, reason: str) -> str:
    """Sent as a text frame just before closing, so browsers (which hide close reasons
    in some paths) can show why."""
    return _dumps({"type": "error", "code": int(code), "reason": reason})
