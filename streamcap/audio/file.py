"""Read any audio or video file as the pipeline's mono float32 16 kHz audio.

libsndfile (``soundfile``) is tried first for its own formats (WAV, FLAC, Ogg, AIFF, ...): fast
and exact. Everything else (MP3, M4A, MP4/MKV video, WebM, ...) and whatever libsndfile cannot
open goes through FFmpeg via PyAV. Resampling is soxr HQ. A decoded stream is cut to the audio
that was encoded (``_Span``): FFmpeg drops an MP4's encoder priming but not the padding of its last
AAC frame, nor the priming of AAC in a container that does not record it (ADTS ``.aac``, MPEG-TS).
Every failure a user can cause (missing, empty, corrupt, video-only, zero-length, a sample rate
below `MIN_SAMPLE_RATE`) becomes an ``AudioError`` with a one-line message; a file damaged
part-way gives the audio before the damage, with a warning. Decoded samples meet the wire's rule
(`pcm.sanitise`: NaN and infinities 0, clipped) before anything else sees them, and resampling
runs in bounded blocks (`resample.resample_blocks`) whatever the ratio.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import soundfile as sf

from streamcap.core.constants import MIN_SAMPLE_RATE
from streamcap.core.safe_text import printable

from .errors import AudioError
from .pcm import sanitise
from .resample import TARGET_RATE, resample, resample_blocks

__all__ = ["audio_duration", "iter_audio_chunks", "load_audio"]

log = logging.getLogger(__name__)

#: Samples per libsndfile read while streaming (about 1-4 s of audio: few calls, little memory).
_SF_BLOCK = 65536

#: Suffixes read with libsndfile first ("" = no extension: let libsndfile sniff it).
_SNDFILE_SUFFIXES = frozenset(
    {
        "",
        ".wav",
        ".wave",
        ".flac",
        ".ogg",
        ".oga",
        ".opus",
        ".aif",
        ".aiff",
        ".aifc",
        ".au",
        ".snd",
        ".caf",
        ".w64",
        ".rf64",
        ".sd2",
        ".voc",
    }
)

# (mono float32 block, its sample rate)
_Block = tuple[np.ndarray, float]


def _one_line(err: BaseException) -> str:
    # FFmpeg errors carry "[Errno N] text: 'path'"; the text alone is what a user needs.
    msg = getattr(err, "strerror", None) if isinstance(err, av.error.FFmpegError) else None
    text = " ".join(str(msg or err).split())
    return text or type(err).__name__


def _named(p: Path) -> str:
    """A file's name for a message: what does not print escaped (`core.safe_text.printable`),
    so that a name holding ESC or a line break cannot drive the terminal or split the line."""
    return printable(str(p))


def _check_path(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    if not p.exists():
        raise AudioError(f"audio file not found: {_named(p)}")
    if p.is_dir():
        raise AudioError(f"not an audio file (it is a directory): {_named(p)}")
    try:
        size = p.stat().st_size
    except OSError as e:
        raise AudioError(f"cannot read {_named(p)}: {_one_line(e)}") from e
    if size == 0:
        raise AudioError(f"empty file (0 bytes): {_named(p)}")
    if not os.access(p, os.R_OK):
        raise AudioError(f"cannot read {_named(p)}: permission denied")
    return p


def _check_rate(p: Path, rate: float) -> None:
    """AudioError for a rate below the floor: no speech lives there, and it is what a broken
    or hostile header says (1 Hz made 49 hours of the JFK clip's 11 s, red team bug 9)."""
    if 0 < rate < MIN_SAMPLE_RATE:
        raise AudioError(
            f"cannot decode {_named(p)}: its sample rate is {rate:g} Hz, below the "
            f"{MIN_SAMPLE_RATE} Hz that speech needs (a broken header?)"
        )


def _open_soundfile(p: Path) -> sf.SoundFile | None:
    """Open with libsndfile, or None when FFmpeg should try instead.

    Only for libsndfile's own formats (and names without an extension): its MP3 support goes
    through mpg123, which prints to stderr on odd files; FFmpeg handles MP3 and the rest.
    """
    if p.suffix.lower() not in _SNDFILE_SUFFIXES:
        return None
    try:
        f = sf.SoundFile(str(p))
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError):
        return None
    try:
        _check_rate(p, f.samplerate)
    except AudioError:
        f.close()
        raise
    return f


def _open_av(p: Path) -> tuple[av.container.InputContainer, av.audio.stream.AudioStream]:
    try:
        container = av.open(str(p), mode="r")
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise AudioError(
            f"cannot decode {_named(p)}: not a readable audio or video file ({_one_line(e)})"
        ) from e
    if not container.streams.audio:
        kinds: list[str] = sorted({str(s.type) for s in container.streams}) or ["no streams"]
        container.close()
        raise AudioError(f"no audio track in {_named(p)} (it has: {', '.join(kinds)})")
    stream = container.streams.audio[0]
    try:
        _check_rate(p, stream.codec_context.sample_rate or 0)
    except AudioError:
        container.close()
        raise
    return container, stream


def _sf_blocks(f: sf.SoundFile, p: Path) -> Iterator[_Block]:
    """Mono blocks, sanitised. A read that fails part-way (a FLAC cut short: "flac decoder
    lost sync") ends the audio there with a warning, keeping every sample decoded before the
    damage, as a cut WAV or MP3 gives what is there; only a file that decodes nothing is an
    error."""
    rate = float(f.samplerate)
    buf = np.empty((_SF_BLOCK, f.channels), dtype=np.float32)
    pos = 0  # frames yielded so far
    try:
        while True:
            try:
                n = len(f.read(out=buf))
            except (sf.LibsndfileError, RuntimeError) as e:
                n = _frames_before_error(f, pos)
                if pos + n == 0:
                    raise AudioError(f"cannot decode {_named(p)}: {_one_line(e)}") from e
                if n:
                    yield _mono(buf[:n]), rate
                _cut_short(p, (pos + n) / rate, f.frames / rate if f.frames > 0 else None, e)
                return
            if n:
                yield _mono(buf[:n]), rate
                pos += n
            if n < _SF_BLOCK:
                return
    finally:
        f.close()


def _mono(block: np.ndarray) -> np.ndarray:
    """A (frames, channels) block as a new mono array, NaN/inf 0 and clipped (`sanitise`)."""
    x = block.mean(axis=1, dtype=np.float32) if block.shape[1] > 1 else block[:, 0].copy()
    return sanitise(x)


def _frames_before_error(f: sf.SoundFile, pos: int) -> int:
    """Frames libsndfile decoded into the buffer before a read failed: where it stopped (its
    position) past where the read began; 0 when it cannot say."""
    try:
        n = int(f.tell()) - pos
    except (sf.LibsndfileError, RuntimeError, ValueError):
        return 0
    return n if 0 <= n <= _SF_BLOCK else 0


def _cut_short(p: Path, at_s: float, of_s: float | None, err: BaseException) -> None:
    of = f" of {of_s:.1f} s" if of_s else ""
    log.warning(
        "%s: decoding stopped at %.1f s%s (%s): the rest of the file is damaged or missing; "
        "the audio before it is used",
        _named(p), at_s, of, _one_line(err),
    )  # fmt: skip


#: AAC-LC's inherent delay: its MDCT frames overlap by 1024 samples, so every LC encoder primes at
#: least that much (FFmpeg's encoder exactly 1024, Apple's 2112). Cutting 1024 is never too much.
_AAC_LC_PRIMING = 1024


def _seconds(ts: int | None, time_base: Fraction | None) -> Fraction | None:
    return None if ts is None or time_base is None else ts * Fraction(time_base)


class _Span:
    """Which decoded samples are the encoded audio: [priming, end) in samples at the stream's rate.

    Why: AAC decodes with 1024+ samples of encoder priming before the signal and pads its last
    frame. MP4 records both (edit list); FFmpeg skips the priming it marks but keeps the padding,
    so a video's audio ran 6-8 ms longer than the WAV it was made from. ADTS and MPEG-TS record
    neither: there the 1024 samples of priming stayed and the audio lagged the original by 23 ms
    at 44.1 kHz (64 ms at 16 kHz). Only an MP4/MOV track's duration is exact (elsewhere FFmpeg may
    estimate it from the bit rate), so only it cuts the end.
    """

    def __init__(
        self, container: av.container.InputContainer, stream: av.audio.stream.AudioStream
    ) -> None:
        self._stream = stream
        self._exact_end = "mov" in container.format.name.split(",")
        self._rate = 0
        self.first_packet_pts: int | None = None
        self.pos = 0  # decoded samples so far (before the cut)
        self.start = 0
        self.end: int | None = None

    def begin(self, frame: av.AudioFrame) -> None:
        """At the first decoded frame: find the priming left in and the stream's exact end."""
        s = self._stream
        self._rate = frame.sample_rate
        cc = s.codec_context
        # A demuxer that knows the priming gives its packets times before the first frame's.
        marked = self.first_packet_pts is not None and frame.pts != self.first_packet_pts
        if cc.name == "aac" and cc.profile == "LC" and not marked:
            self.start = _AAC_LC_PRIMING
        first = _seconds(frame.pts, frame.time_base)
        start, length = _seconds(s.start_time, s.time_base), _seconds(s.duration, s.time_base)
        if self._exact_end and first is not None and start is not None and length is not None:
            self.end = round((start + length - first) * self._rate)

    def cut(self, data: np.ndarray, rate: int) -> np.ndarray:
        """The part of ``data`` (channels, n), the next decoded samples, that is encoded audio."""
        if rate != self._rate:  # the stream changed rate: sample counts no longer line up
            self.end, self._rate = None, rate
        lo, self.pos = self.pos, self.pos + data.shape[-1]
        end = self.pos if self.end is None else self.end
        return data[:, max(0, self.start - lo) : max(0, end - lo)]


def _av_blocks(
    container: av.container.InputContainer, stream: av.audio.stream.AudioStream, p: Path
) -> Iterator[_Block]:
    """Decode the first audio stream; skip corrupt packets like ``ffmpeg`` does."""
    converter: av.AudioResampler | None = None
    span = _Span(container, stream)
    bad_packets = 0
    decoded = 0
    rate = 1.0
    first_error = ""
    try:
        for packet in container.demux(stream):
            if span.first_packet_pts is None:
                span.first_packet_pts = packet.pts
            try:
                frames = packet.decode()
            except av.error.FFmpegError as e:
                bad_packets += 1
                first_error = first_error or _one_line(e)
                continue
            for frame in frames:
                if converter is None:
                    # Planar float at the frame's own rate and layout: downmix and rate are ours.
                    converter = av.AudioResampler(format="fltp")
                    span.begin(frame)
                try:
                    out = converter.resample(frame)
                except ValueError:  # layout or rate changed mid-stream: start a new converter
                    converter = av.AudioResampler(format="fltp")
                    out = converter.resample(frame)
                for f in out:
                    data = span.cut(f.to_ndarray(), f.sample_rate)
                    if data.shape[-1]:
                        decoded += data.shape[-1]
                        rate = float(f.sample_rate)
                        yield sanitise(data.mean(axis=0, dtype=np.float32)), rate
    except av.error.FFmpegError as e:
        if not decoded:
            raise AudioError(f"cannot decode {_named(p)}: {_one_line(e)}") from e
        _cut_short(p, decoded / rate, None, e)  # what decoded before the damage is kept
    finally:
        container.close()
    if decoded == 0 and bad_packets:
        raise AudioError(
            f"cannot decode {_named(p)}: corrupt audio ({bad_packets} bad packets, e.g. "
            f"{first_error})"
        )


def _open_blocks(path: str | os.PathLike[str]) -> tuple[Path, Iterator[_Block]]:
    """Validate and open ``path`` now (so errors are raised eagerly); decode lazily."""
    p = _check_path(path)
    f = _open_soundfile(p)
    if f is not None:
        return p, _sf_blocks(f, p)
    container, stream = _open_av(p)
    return p, _av_blocks(container, stream, p)


def _no_samples(p: Path) -> AudioError:
    return AudioError(f"no audio samples in {_named(p)} (zero-length audio)")


def load_audio(path: str | os.PathLike[str], sample_rate: int = TARGET_RATE) -> np.ndarray:
    """Read a whole audio or video file as mono float32 at ``sample_rate`` in [-1, 1].

    For long recordings prefer ``iter_audio_chunks`` (this holds the whole file in memory).
    """
    p = _check_path(path)
    f = _open_soundfile(p)
    if f is not None:  # one-shot resampling of the whole file (at most 2x it: the rate floor)
        rate = f.samplerate
        blocks = [block for block, _ in _sf_blocks(f, p)]
        if not blocks:
            raise _no_samples(p)
        audio = resample(np.concatenate(blocks), rate, sample_rate)
    else:
        container, stream = _open_av(p)
        pieces = list(resample_blocks(_av_blocks(container, stream, p), sample_rate))
        audio = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
    if audio.size == 0:
        raise _no_samples(p)
    return np.clip(audio, -1.0, 1.0, out=audio)


def iter_audio_chunks(
    path: str | os.PathLike[str], chunk_s: float = 0.1, sample_rate: int = TARGET_RATE
) -> Iterator[np.ndarray]:
    """Stream a file as consecutive mono float32 chunks of ``chunk_s`` seconds (last one shorter).

    Decoding and resampling are incremental, so memory stays flat for a 2-hour file. The file is
    opened now: a missing or undecodable file raises ``AudioError`` here, not at the first chunk.
    """
    if chunk_s <= 0:
        raise ValueError(f"chunk_s must be positive, got {chunk_s}")
    size = max(1, round(chunk_s * sample_rate))
    p, blocks = _open_blocks(path)
    return _rechunk(resample_blocks(blocks, sample_rate), size, lambda: _no_samples(p))


def _rechunk(
    pieces: Iterator[np.ndarray], size: int, on_empty: Callable[[], AudioError]
) -> Iterator[np.ndarray]:
    buf = np.zeros(0, dtype=np.float32)
    total = 0
    for piece in pieces:
        if piece.size == 0:
            continue
        buf = np.concatenate([buf, piece]) if buf.size else piece
        start = 0
        while buf.size - start >= size:
            chunk = np.clip(buf[start : start + size], -1.0, 1.0)
            total += size
            start += size
            yield chunk
        buf = buf[start:]
    if buf.size:
        total += buf.size
        yield np.clip(buf, -1.0, 1.0)
    if total == 0:
        raise on_empty()


def audio_duration(path: str | os.PathLike[str]) -> float | None:
    """Duration in seconds from the file's header (for progress bars); None if it does not say."""
    p = _check_path(path)
    f = _open_soundfile(p)
    if f is not None:
        with f:
            if f.frames > 0 and f.samplerate > 0:
                return f.frames / f.samplerate
        return None
    container, stream = _open_av(p)
    try:
        if stream.duration is not None and stream.time_base is not None:
            return float(stream.duration * stream.time_base)
        if container.duration is not None:
            return container.duration / av.time_base
        return None
    finally:
        container.close()
