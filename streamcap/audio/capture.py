"""A publisher's sources (`streamcap publish`), opened alike, and the thread that captures one
into the buffer its sender reads.

Each source gives the pipeline's audio (16 kHz mono float32) in chunks as it comes, and is
*live* or not. A live source (a microphone, a monitor of what the computer plays, a live
stream: RTMP, RTSP, SRT, a live HLS playlist) goes on whether anyone reads it, so while the
server is away its audio waits in the buffer, and past the buffer's capacity the oldest is
dropped (`core.resume.ResumeBuffer`). Any other source (a file, standard input, a file on a
web server) is read when there is room, so nothing of it is ever dropped; its sender paces it
at real time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

import numpy as np

from streamcap.core.resume import ResumeBuffer

from .errors import AudioError

if TYPE_CHECKING:
    from .stream_input import RawPcm

__all__ = [
    "CaptureBuffer",
    "Source",
    "capture_into",
    "open_file",
    "open_mic",
    "open_monitor",
    "open_stdin",
    "open_url",
]

#: Seconds of audio per chunk a source gives (the sender's frames are as long).
CHUNK_S = 0.1


@dataclass
class Source:
    """An opened source: its chunks, whether it is live (see the module docstring), a name for
    messages, its length when known, and how to stop it."""

    name: str
    chunks: Iterator[np.ndarray]
    live: bool
    stop: Callable[[], None] = lambda: None
    duration_s: float | None = None


def open_file(path: str) -> Source:
    """A file (any audio or video FFmpeg reads), read ahead of its real-time sending."""
    from .file import audio_duration, iter_audio_chunks

    chunks = iter_audio_chunks(path, chunk_s=CHUNK_S)  # AudioError now for a bad file
    return Source(path, chunks, live=False, duration_s=audio_duration(path))


def open_stdin(stdin: IO[bytes], raw: RawPcm | None) -> Source:
    """Standard input: raw PCM as `raw` says, else any container (PyAV finds out which)."""
    from .stream_input import av_chunks, open_container, raw_chunks

    if raw is not None:
        return Source("standard input", raw_chunks(stdin, raw, CHUNK_S), live=False)
    container = open_container(stdin, "standard input")
    return Source("standard input", av_chunks(container, "standard input"), live=False)


def open_url(url: str) -> Source:
    """A URL FFmpeg opens: live when it is a live stream (`stream_input.is_live`). A protocol
    PyAV's FFmpeg lacks (SRT) is read by the ``ffmpeg`` program instead, as a live stream."""
    from .stream_input import (
        LIVE_SCHEMES,
        av_chunks,
        ffmpeg_chunks,
        is_live,
        open_container,
        url_for_messages,
    )

    name = url_for_messages(url)
    try:
        container = open_container(url, name)
    except AudioError as e:
        if "Protocol not found" not in str(e):
            raise
        chunks, stop = ffmpeg_chunks(url, CHUNK_S)
        live = url.split(":", 1)[0].lower() in LIVE_SCHEMES
        return Source(name, chunks, live, stop=stop)
    duration = container.duration / 1_000_000 if container.duration else None
    return Source(name, av_chunks(container, name), is_live(url, container), duration_s=duration)


def open_mic(device: str | None) -> Source:
    """A microphone by name (a case-insensitive part of it) or index; None: the default."""
    from .mic import MicSource

    mic = MicSource(device, chunk_s=CHUNK_S).start()
    name = mic.device.name if mic.device is not None else "microphone"
    return Source(f"microphone {name!r}", iter(mic), live=True, stop=mic.stop)


def open_monitor(sink: str | None) -> Source:
    """What the computer plays into `sink` (None: the default sink)."""
    from .monitor import MonitorSource

    monitor = MonitorSource(sink, chunk_s=CHUNK_S).start()
    return Source(f"monitor {monitor.device}", iter(monitor), live=True, stop=monitor.stop)


class CaptureBuffer:
    """A `ResumeBuffer` shared by the capture thread (`put`, `end`) and the sender (the rest),
    under one lock; a source that is not live waits in `put` while the buffer is full."""

    def __init__(self, buffer: ResumeBuffer) -> None:
        self.buffer = buffer
        self._cond = threading.Condition()
        self.ended = False  # the source has no more audio (or failed: `error`)
        self.error: BaseException | None = None
        self._closing = False

    def put(self, chunk: np.ndarray, live: bool) -> int:
        """Add captured audio; returns the samples of unsent audio dropped to make room (a live
        source), 0 for one that waited."""
        with self._cond:
            while not live and self.buffer.full and not self._closing:
                self._cond.wait(0.5)
            if self._closing:
                return 0
            return self.buffer.append(chunk)

    def end(self, error: BaseException | None = None) -> None:
        with self._cond:
            self.ended = True
            self.error = error
            self._cond.notify_all()

    def close(self) -> None:
        """Stop the capture: a waiting `put` returns, and the thread ends at its next chunk."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    def stop(self, keep_unsent: bool) -> None:
        """End the capture now: what was captured and not sent still goes out if
        `keep_unsent` (a live source's backlog is speech), else it is dropped (a file's
        read-ahead is what was asked not to be sent)."""
        with self._cond:
            self._closing = True
            if not keep_unsent:
                self.buffer.drop_unsent()
            self.ended = True
            self._cond.notify_all()

    @property
    def closing(self) -> bool:
        return self._closing

    def take(self, most: int) -> tuple[int, np.ndarray]:
        with self._cond:
            got = self.buffer.take(most)
            self._cond.notify_all()
            return got

    def rewind(self, position: int) -> int:
        with self._cond:
            return self.buffer.rewind(position)

    def state(self) -> tuple[int, int, int, bool]:
        """(sent, captured, lost, ended): what the sender and the status line need."""
        with self._cond:
            b = self.buffer
            return b.sent, b.captured, b.lost, self.ended


def capture_into(source: Source, into: CaptureBuffer, on_drop: Callable[[int], None]) -> None:
    """The capture thread's body: every chunk of `source` into the buffer until it ends or the
    buffer closes; `on_drop(samples)` when a live source's audio was dropped for room. The
    source is stopped at the end; its error (AudioError) is the buffer's `error`."""
    error: BaseException | None = None
    try:
        for chunk in source.chunks:
            if into.closing:
                break
            dropped = into.put(chunk, source.live)
            if dropped:
                on_drop(dropped)
    except AudioError as e:
        error = e
    except Exception as e:  # a decoder's or a device's failure: reported, not a traceback
        error = AudioError(f"{source.name}: {type(e).__name__}: {e}")
    finally:
        try:
            source.stop()
        finally:
            into.end(error)
