"""Audio that arrives as a stream rather than as a file: a pipe (standard input) or a URL.

Three readers, each giving the pipeline's mono float32 16 kHz audio in chunks as it comes:

- `raw_chunks`: raw PCM (``s16le`` or ``f32le``, any rate and channel count) from a binary
  file object, as ``ffmpeg -f s16le -``, ``arecord`` or ``parec`` write it;
- `av_chunks`: any container or codec FFmpeg reads (WAV, MP3, Ogg, WebM, MPEG-TS, ...), from a
  file object (a pipe: read as it comes, never sought) or a URL FFmpeg opens (``http(s)://``,
  HLS playlists, ``rtmp://``, ``rtsp://``, ``srt://``, ``udp://``), through PyAV;
- `spool_stdin`: standard input copied whole to a file (`streamcap transcribe -`: offline
  transcription wants a file it can measure; raw PCM becomes a WAV).

Decoded samples meet the wire's rule (`pcm.sanitise`) and are resampled with streaming soxr
(`resample.StreamResampler`), as a file's are. Every failure a user can cause is an
``AudioError`` with one line.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import urlsplit

import av
import numpy as np

from streamcap.core.constants import MIN_SAMPLE_RATE
from streamcap.core.safe_text import printable

from .errors import AudioError
from .pcm import pcm_to_float, sanitise
from .resample import TARGET_RATE, StreamResampler

__all__ = [
    "LIVE_SCHEMES",
    "RawPcm",
    "av_chunks",
    "ffmpeg_chunks",
    "is_live",
    "is_url",
    "open_container",
    "raw_chunks",
    "spool_stdin",
    "url_for_messages",
]

#: URL schemes of streams that are live by nature: read as they come, never faster.
LIVE_SCHEMES = frozenset({"rtmp", "rtmps", "rtsp", "rtsps", "srt", "udp", "rtp", "tcp"})
#: Schemes FFmpeg opens that name something to read (a URL, not a file name with a colon).
_URL_SCHEMES = LIVE_SCHEMES | {"http", "https", "hls"}
#: FFmpeg's options for network inputs: give up on a server that stops sending (FFmpeg waits
#: for ever by default: `rw_timeout`, microseconds, every protocol), and reconnect an HTTP
#: stream that drops. Not `timeout`: for rtmp:// it means "listen for a connection".
_NETWORK_OPTIONS = {"rw_timeout": "15000000"}
_HTTP_OPTIONS = {"reconnect": "1", "reconnect_streamed": "1", "reconnect_delay_max": "10"}

log = logging.getLogger(__name__)

RawFormat = Literal["s16le", "f32le"]
_WIRE = {"s16le": "pcm_s16le", "f32le": "f32le"}


@dataclass(frozen=True)
class RawPcm:
    """Raw PCM's layout, which nothing in the bytes says: sample format, rate and channels."""

    format: RawFormat = "s16le"
    rate: int = TARGET_RATE
    channels: int = 1

    def __post_init__(self) -> None:
        if self.format not in _WIRE:
            raise ValueError(f"raw PCM format must be s16le or f32le, got {self.format!r}")
        if not MIN_SAMPLE_RATE <= self.rate <= 384_000:
            raise ValueError(f"raw PCM rate must be {MIN_SAMPLE_RATE}-384000 Hz, got {self.rate}")
        if not 1 <= self.channels <= 32:
            raise ValueError(f"raw PCM channels must be 1-32, got {self.channels}")

    @property
    def frame_bytes(self) -> int:
        return (2 if self.format == "s16le" else 4) * self.channels


def is_url(source: str) -> bool:
    """Whether `source` is a URL FFmpeg should open (not a file name)."""
    scheme = urlsplit(source).scheme.lower()
    return scheme in _URL_SCHEMES


def is_live(source: str, container: av.container.InputContainer) -> bool:
    """Whether an opened URL is a live stream (read as it comes) rather than a file on a
    server (read at the pace the caller wants): a live scheme, or no known duration (a live
    HLS playlist, an Icecast stream)."""
    return urlsplit(source).scheme.lower() in LIVE_SCHEMES or container.duration is None


def raw_chunks(stream: IO[bytes], raw: RawPcm, chunk_s: float = 0.1) -> Iterator[np.ndarray]:
    """Raw PCM from `stream` as 16 kHz mono chunks of about `chunk_s`, as the bytes arrive
    (a buffered pipe's ``read(n)`` waits for n bytes or the end); a torn last frame is
    dropped."""
    want = max(1, round(chunk_s * raw.rate)) * raw.frame_bytes
    resampler = StreamResampler(raw.rate, TARGET_RATE)
    pending = b""
    while data := stream.read(want):
        pending += data
        whole = len(pending) - len(pending) % raw.frame_bytes
        if not whole:
            continue
        out = resampler.process(pcm_to_float(pending[:whole], _WIRE[raw.format], raw.channels))
        pending = pending[whole:]
        if out.size:
            yield out
    tail = resampler.flush()
    if tail.size:
        yield tail


def _one_line(err: BaseException) -> str:
    msg = getattr(err, "strerror", None) if isinstance(err, av.error.FFmpegError) else None
    return " ".join(str(msg or err).split()) or type(err).__name__


def open_container(source: str | IO[bytes], name: str) -> av.container.InputContainer:
    """`source` (a URL or a file object) opened by FFmpeg; AudioError (one line) if it cannot
    be, or holds no audio."""
    try:
        if isinstance(source, str):
            http = urlsplit(source).scheme.lower() in ("http", "https")
            options = {**_NETWORK_OPTIONS, **(_HTTP_OPTIONS if http else {})}
            container = av.open(source, mode="r", options=options, timeout=15.0)
        else:
            container = av.open(source, mode="r")
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise AudioError(f"cannot open {name}: {_one_line(e)}") from e
    if not container.streams.audio:
        kinds = sorted({str(s.type) for s in container.streams}) or ["no streams"]
        container.close()
        raise AudioError(f"no audio in {name} (it has: {', '.join(kinds)})")
    return container


def av_chunks(container: av.container.InputContainer, name: str) -> Iterator[np.ndarray]:
    """The first audio stream of an open container (`open_container`) as 16 kHz mono chunks,
    decoded as the data comes; a packet that does not decode is skipped, as ``ffmpeg`` does.
    Closes the container at the end. AudioError when reading fails before any audio."""
    stream = container.streams.audio[0]
    converter: Any = None
    resampler: StreamResampler | None = None
    decoded = 0
    rate = 1.0
    try:
        for packet in container.demux(stream):
            try:
                frames = packet.decode()
            except av.error.FFmpegError:
                continue
            for frame in frames:
                rate = float(frame.sample_rate)  # decoded counts samples at this rate
                if converter is None or resampler is None or resampler.in_rate != rate:
                    if resampler is not None:
                        yield resampler.flush()
                    converter = av.AudioResampler(format="fltp")
                    resampler = StreamResampler(rate, TARGET_RATE)
                try:
                    planes = converter.resample(frame)
                except ValueError:  # the layout changed mid-stream
                    converter = av.AudioResampler(format="fltp")
                    planes = converter.resample(frame)
                for f in planes:
                    data = f.to_ndarray()
                    out = resampler.process(sanitise(data.mean(axis=0, dtype=np.float32)))
                    decoded += data.shape[-1]
                    if out.size:
                        yield out
    except av.error.FFmpegError as e:
        if not decoded:
            raise AudioError(f"cannot read {name}: {_one_line(e)}") from e
        log.warning("%s: reading stopped after %.1f s: %s", name, decoded / rate, _one_line(e))
    finally:
        container.close()
    if resampler is not None:
        tail = resampler.flush()
        if tail.size:
            yield tail


def ffmpeg_chunks(
    url: str, chunk_s: float = 0.1
) -> tuple[Iterator[np.ndarray], Callable[[], None]]:
    """`url` read by the ``ffmpeg`` program (for a protocol PyAV's own FFmpeg lacks: its
    wheels have no SRT) as raw 16 kHz mono PCM on a pipe; the chunks, and how to stop it (by
    its own pid). AudioError when there is no ffmpeg."""
    exe = shutil.which("ffmpeg")
    if exe is None:
        raise AudioError(f"cannot open {url_for_messages(url)}: needs the ffmpeg program")
    proc = subprocess.Popen(
        [exe, "-nostdin", "-v", "error", "-rw_timeout", "15000000", "-i", url, "-vn",
         "-f", "s16le", "-ac", "1", "-ar", str(TARGET_RATE), "-"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None

    def stop() -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    return raw_chunks(proc.stdout, RawPcm("s16le", TARGET_RATE, 1), chunk_s), stop


def spool_stdin(stdin: IO[bytes], raw: RawPcm | None, folder: str | None = None) -> Path:
    """Standard input copied whole into a new temporary file (the caller deletes it): raw PCM
    as a WAV, anything else byte for byte (FFmpeg or libsndfile tells what it is). AudioError
    when nothing came."""
    fd, name = tempfile.mkstemp(prefix="streamcap-stdin-", suffix=".wav" if raw else "",
                                dir=folder)  # fmt: skip
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            if raw is None:
                shutil.copyfileobj(stdin, out, 1 << 20)
            else:
                _write_wav(stdin, raw, out)
        if path.stat().st_size == 0 or (raw is not None and path.stat().st_size <= 44):
            raise AudioError("no audio on standard input (it was empty)")
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def _write_wav(stdin: IO[bytes], raw: RawPcm, out: IO[bytes]) -> None:
    """Raw PCM into a WAV file as it is: its rate and channels, 16-bit or float."""
    import soundfile as sf

    subtype = "PCM_16" if raw.format == "s16le" else "FLOAT"
    dtype = "<i2" if raw.format == "s16le" else "<f4"
    with sf.SoundFile(out, "w", raw.rate, raw.channels, subtype=subtype, format="WAV") as wav:
        pending = b""
        while data := stdin.read(1 << 20):
            pending += data
            whole = len(pending) - len(pending) % raw.frame_bytes
            block = np.frombuffer(pending[:whole], dtype=dtype).reshape(-1, raw.channels)
            wav.write(block)
            pending = pending[whole:]


def url_for_messages(source: str) -> str:
    """A source's name for messages: what does not print escaped, and no password."""
    parts = urlsplit(source)
    if parts.password:
        source = source.replace(f":{parts.password}@", ":***@")
    return printable(source)
