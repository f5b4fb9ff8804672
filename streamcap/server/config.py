"""Server configuration, and how the server makes a live stream for a publisher (on its
worker: `runtime.worker_api.Worker`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from streamcap.core.captions import CaptionEvent
from streamcap.decoding.spec import DecodingError
from streamcap.sinks.base import SinkSpec

from .access import is_loopback
from .close import CloseCode, ProtocolError
from .protocol import (
    DEFAULT_BURST_S,
    DEFAULT_FRAME_BURST,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_FRAME_RATE,
    StartMessage,
)

if TYPE_CHECKING:  # the runtime pulls in torch: typing only
    import ssl

    from streamcap.core.live_config import LiveConfig
    from streamcap.core.policy_window import DroppedFinal
    from streamcap.runtime.worker_api import Worker

__all__ = ["ServerConfig"]


@dataclass(frozen=True)
class ServerConfig:
    """Everything the server needs to know; the CLI builds one from flags."""

    host: str = "127.0.0.1"
    port: int = 8765
    publish_token: str | None = None
    view_token: str | None = None
    #: Origins allowed besides the server's own (same host:port); "*" allows any.
    allowed_origins: tuple[str, ...] = ()
    #: Host names served besides IP literals, localhost names and the bound name (DNS
    #: rebinding guard, `access.host_allowed`); ".example.com" for a domain, "*" for any.
    allowed_hosts: tuple[str, ...] = ()
    #: Token for `/metrics` (None: open on a loopback-bound server, else loopback clients only).
    metrics_token: str | None = None
    max_streams: int = 8
    #: Publishers one stream (room) may have at once, each with its own `speaker` name.
    max_speakers_per_room: int = 8
    #: Refuse a new publisher (1013) when the worker's measured load says it would not keep
    #: up (`core.capacity`); False: only `max_streams` limits.
    admission: bool = True
    max_viewers: int = 256
    #: Open TCP connections at once, counted from the accept (None: streams + viewers + 64).
    #: Connections not yet authenticated get at most half of it (`budget.ConnectionBudget`).
    max_connections: int | None = None
    #: Connections from one client address that have not proved themselves yet (a viewer
    #: before its token is checked, a publisher before its start message claims its place).
    max_pending_per_address: int = 16
    #: On a side without a token (anyone may take its slots), the viewers and the publishers
    #: (stream slots) one client address may hold at once, so the first comer cannot take a
    #: whole open server. None: half of `max_viewers` / `max_streams` on a server that listens
    #: beyond this machine, no limit on a loopback one (every client is this machine's). Token
    #: holders are never limited per address.
    max_viewers_per_address: int | None = None
    max_streams_per_address: int | None = None
    #: New connections a second from one client address, after a burst of 200 (None: no
    #: limit); more are dropped at the accept (`budget.ConnectionBudget`).
    max_accept_rate_per_address: float | None = 50.0
    #: A connection must have sent its whole HTTP request (or WebSocket upgrade) this soon.
    handshake_timeout_s: float = 5.0
    #: Subtitle downloads (bytes) per client address: a burst of this many, refilled at
    #: `download_rate` bytes/s; beyond it 429 with Retry-After. All addresses together get 4x.
    #: (A looping download of a 10 000-final VTT took the CPU from the captions: issue 21.)
    download_burst: float = 64e6
    download_rate: float = 2e6
    #: A subtitle response must be taken within this many seconds plus its size at
    #: `subtitle_send_rate` bytes/s, or its socket is dropped (a stalled reader lets go of
    #: the body it pins; `subtitles.py`).
    subtitle_send_base_s: float = 10.0
    subtitle_send_rate: float = 256 * 1024
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    #: A publisher that sends nothing for this long is closed (1008).
    idle_timeout_s: float = 30.0
    #: A publisher that sends no audio for this long while an utterance is open gets it
    #: finalised as if it had fallen silent (None: only the idle timeout does).
    utterance_idle_s: float | None = 3.0
    #: A publisher must send its `start` message within this time (1008), so sockets that never
    #: start cannot hold the stream slots.
    start_timeout_s: float = 5.0
    #: Audio a publisher may be ahead of real time (None: no flood guard).
    burst_s: float | None = DEFAULT_BURST_S
    #: Messages per second a publisher may send on average, empty ones included (None: no limit).
    max_frame_rate: float | None = DEFAULT_MAX_FRAME_RATE
    frame_burst: int = DEFAULT_FRAME_BURST
    unknown_stream: Literal["wait", "reject"] = "wait"
    #: Ended streams kept for `since` replay and SRT/VTT (oldest dropped first).
    retain_streams: int = 64
    #: Finals a stream keeps in memory for replay and SRT/VTT without `--record` (oldest
    #: dropped; 10 000 finals are ~37 MB).
    max_finals: int = 10_000
    #: With `--record`, the finals a stream keeps in memory: older ones are read back from the
    #: recording when a viewer resumes before them or a subtitle file is downloaded, so a
    #: stream's memory stays flat however long it runs (issue 25).
    recorded_memory_finals: int = 500
    #: A viewer whose socket does not take one event within this time is closed (1008).
    viewer_send_timeout_s: float = 10.0
    #: How long to wait for the last final after a publisher stops or drops.
    finish_timeout_s: float = 60.0
    #: At shutdown, how long viewers get to receive the last finals before they are closed.
    shutdown_flush_s: float = 10.0
    record_dir: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: The TLS context of `tls_cert`/`tls_key` when the caller built it already (`streamcap
    #: serve` does, before the model loads, and refuses an encrypted key there): the key is
    #: read once. None: the server builds it from the files.
    ssl_context: ssl.SSLContext | None = dataclasses.field(default=None, compare=False, repr=False)
    web_dir: Path | None = None
    ping_interval_s: float | None = 20.0
    #: how long a ping may go unanswered before the connection is closed 1011
    ping_timeout_s: float | None = 20.0
    #: Language for streams whose start message says null (None: detect).
    default_language: str | None = None
    #: Where streams' captions go besides the viewers (YouTube, Zoom, OBS: `streamcap.sinks`);
    #: a spec's repr hides its target, which may be a secret.
    sinks: tuple[SinkSpec, ...] = ()

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key go together")
        if self.unknown_stream not in ("wait", "reject"):
            raise ValueError(
                f"unknown_stream must be 'wait' or 'reject', not {self.unknown_stream!r}"
            )
        for name in (
            "max_streams", "max_viewers", "max_frame_bytes", "retain_streams",
            "max_speakers_per_room", "max_finals", "recorded_memory_finals",
        ):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_connections is not None and self.max_connections < 2:
            raise ValueError("max_connections must be at least 2")
        if self.max_frame_rate is not None and self.max_frame_rate <= 0:
            raise ValueError("max_frame_rate must be positive")
        if self.start_timeout_s <= 0:
            raise ValueError("start_timeout_s must be positive")
        if self.handshake_timeout_s <= 0:
            raise ValueError("handshake_timeout_s must be positive")
        if self.max_accept_rate_per_address is not None and self.max_accept_rate_per_address <= 0:
            raise ValueError("max_accept_rate_per_address must be positive (or None)")
        if self.download_burst <= 0 or self.download_rate <= 0:
            raise ValueError("download_burst and download_rate must be positive")
        if self.subtitle_send_base_s <= 0 or self.subtitle_send_rate <= 0:
            raise ValueError("subtitle_send_base_s and subtitle_send_rate must be positive")
        if self.utterance_idle_s is not None and not self.utterance_idle_s > 0:
            raise ValueError("utterance_idle_s must be positive (or None)")
        if self.max_pending_per_address < 1:
            raise ValueError("max_pending_per_address must be at least 1")
        for share in ("max_viewers_per_address", "max_streams_per_address"):
            if getattr(self, share) is not None and getattr(self, share) < 1:
                raise ValueError(f"{share} must be at least 1 (or None)")

    @property
    def memory_finals(self) -> int:
        """Finals a stream's log holds in memory (see `recorded_memory_finals`)."""
        if self.record_dir is None:
            return self.max_finals
        return min(self.max_finals, self.recorded_memory_finals)

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def connection_limit(self) -> int:
        if self.max_connections is not None:
            return self.max_connections
        return self.max_streams + self.max_viewers + 64

    @property
    def pending_per_address(self) -> int:
        """Connections not yet authenticated one address may hold: `max_pending_per_address`,
        but never more than a quarter of all pending ones (half the connection budget), so
        with a small `max_connections` one address's idle sockets still leave room for others
        (red-team round 4, bug 12: 30 connections, 16 per address, 15 pending in all)."""
        return max(1, min(self.max_pending_per_address, self.connection_limit // 2 // 4))

    def _share(self, token: str | None, share: int | None, total: int) -> int | None:
        if token is not None:  # the token is the guard: its holders are trusted
            return None
        if share is not None:
            return share
        return None if is_loopback(self.host) else max(1, total // 2)

    @property
    def viewers_per_address(self) -> int | None:
        """Viewers one client address may hold (None: no limit; see `max_viewers_per_address`)."""
        return self._share(self.view_token, self.max_viewers_per_address, self.max_viewers)

    @property
    def streams_per_address(self) -> int | None:
        """Stream slots one client address's publishers may hold, and so the seconds of audio
        a second they may send together (None: no limit; see `max_streams_per_address`)."""
        return self._share(self.publish_token, self.max_streams_per_address, self.max_streams)


class LiveStreamLike(Protocol):
    def feed(self, samples: Any) -> None: ...
    def pause(self) -> None: ...
    def finish(self) -> None: ...
    def wait_idle(self, timeout: float | None = None) -> Any: ...


#: (stream id, validated start message, caption callback from any thread) -> live stream.
StreamFactory = Callable[[str, StartMessage, Callable[[CaptionEvent], None]], LiveStreamLike]


def live_stream_factory(
    worker: Worker,
    base_config: LiveConfig | None = None,
    default_language: str | None = None,
    speakers: str = "off",
    on_drop: Callable[[DroppedFinal], None] | None = None,
    voices: Sequence[Any] = (),
) -> StreamFactory:
    """Builds `LiveStream`s on `worker`, per-stream language, task and prompt from `start`
    (a start message without a prompt or vocabulary gets the server's, `base_config.prompt`).

    `speakers` "auto": streams are labelled by voice (`runtime.labeller.SpeakerLabeller`, one
    voice encoder for all, loaded at the first such stream) unless their start says "off"; a
    room's named publishers are never (their name says who spoke). ``voices``: enrolled
    voices (`runtime.enrol.EnrolledVoice`, ``--enroll``) every labeller knows from the start."""
    from streamcap.core.live_config import LiveConfig
    from streamcap.runtime.clock import RealClock
    from streamcap.runtime.stream import LiveStream

    base = base_config if base_config is not None else LiveConfig()

    def labeller(clock: Any) -> Any:
        from streamcap.errors import UserError
        from streamcap.runtime.labeller import SpeakerLabeller

        try:  # the process's one voice encoder, loaded at the first labelled stream
            return SpeakerLabeller(clock=clock, voices=voices)
        except UserError as e:  # its weights are not installed
            raise ProtocolError(
                CloseCode.UNSUPPORTED_DATA, f"speaker labels unavailable here: {e}"
            ) from None

    def make(
        stream: str, start: StartMessage, on_caption: Callable[[CaptionEvent], None]
    ) -> LiveStreamLike:
        from streamcap.core.live_config import split_language

        language, lock = split_language(start.language or default_language)
        engine = worker.engine
        if language is not None and engine.multilingual:
            try:
                engine.spec.language_id(language)
            except DecodingError:
                raise ProtocolError(
                    CloseCode.UNSUPPORTED_DATA, f"unsupported language {language!r}"
                ) from None
        cfg = dataclasses.replace(
            base,
            language=language,
            lock_language=lock,
            task=start.task,
            prompt=start.prompt or base.prompt,
        )
        clock = RealClock()
        mode = start.speakers or speakers
        stage = labeller(clock) if mode == "auto" and not start.speaker else None
        return LiveStream(stream, worker, on_caption, cfg, clock, stage, on_drop)

    return make
