"""streamcap.audio file decoding, resampling, PCM and clocks, on real files and real encoders.

Other formats are made during the test from ``tests/data`` WAVs with real tools (sox, and FFmpeg's
encoders through PyAV) and decoded back; correlation after alignment shows the audio survived.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from audiokit import encode
from pulse_mic import best_alignment

from streamcap.audio import (
    AudioError,
    StreamResampler,
    audio_duration,
    float_to_pcm,
    iter_audio_chunks,
    load_audio,
    pcm_to_float,
)
from streamcap.audio.resample import resample
from streamcap.runtime.clock import RealClock, SimulatedClock, paced_chunks

DATA = Path(__file__).resolve().parents[1] / "data"
JFK = DATA / "en_real_jfk.wav"  # 11.0 s, 16 kHz mono
OTHER = DATA / "en_real_librivox_0870.wav"

needs_sox = pytest.mark.skipif(shutil.which("sox") is None, reason="sox not installed")


@pytest.fixture(scope="module")
def jfk() -> np.ndarray:
    return load_audio(JFK)


def sox(*args: str | Path) -> None:
    subprocess.run(["sox", "-q", *map(str, args)], check=True, capture_output=True, timeout=60)


# --- decoding real files in many formats -----------------------------------------------------


def test_wav_16k_is_read_exactly(jfk: np.ndarray) -> None:
    raw, rate = sf.read(JFK, dtype="int16")
    assert rate == 16000 and jfk.dtype == np.float32 and jfk.ndim == 1
    np.testing.assert_array_equal(jfk, raw.astype(np.float32) / 32768)


PYAV_FORMATS = {
    # name: (container, codec, rate, layout, with a video track, min correlation)
    "mp3": ("mp3", "libmp3lame", 44100, "stereo", False, 0.97),
    "m4a": ("ipod", "aac", 48000, "stereo", False, 0.97),
    "mp4": ("mp4", "aac", 44100, "mono", True, 0.97),
    "mkv": ("matroska", "libopus", 48000, "stereo", True, 0.97),
    "webm": ("webm", "libopus", 48000, "mono", False, 0.97),
    "flac": ("flac", "flac", 22050, "stereo", False, 0.999),
}


@pytest.mark.parametrize("ext", sorted(PYAV_FORMATS))
def test_encoded_formats_round_trip(ext: str, jfk: np.ndarray, tmp_path: Path) -> None:
    container, codec, rate, layout, video, min_corr = PYAV_FORMATS[ext]
    path = encode(jfk, tmp_path / f"jfk.{ext}", container, codec, rate, layout, video)
    got = load_audio(path)
    assert got.dtype == np.float32 and got.ndim == 1
    # priming cut; at most one codec frame of padding left (where the container has no end)
    assert 0 <= got.size - jfk.size <= 2048 * 16000 // rate, got.size
    corr, offset = best_alignment(got[1600:-1600], jfk)
    assert corr > min_corr, f"{ext}: correlation {corr:.4f}"
    assert abs(offset - 1600) <= 2  # aligned to the sample, not just similar
    assert audio_duration(path) == pytest.approx(11.0, abs=0.1)
    streamed = np.concatenate(list(iter_audio_chunks(path, chunk_s=0.25)))
    assert streamed.size == got.size
    np.testing.assert_allclose(streamed, got, atol=1e-6)


@needs_sox
@pytest.mark.parametrize(
    ("name", "sox_out"),
    [
        ("44k1_stereo.wav", ["-r", "44100", "-c", "2"]),
        ("48k_stereo.flac", ["-r", "48000", "-c", "2"]),
        ("22k05_mono.ogg", ["-r", "22050"]),
        ("8k_mono_24bit.wav", ["-r", "8000", "-b", "24"]),
    ],
)
def test_sox_variants_resample_back(
    name: str, sox_out: list[str], jfk: np.ndarray, tmp_path: Path
) -> None:
    path = tmp_path / name
    sox(JFK, *sox_out, path)
    got = load_audio(path)
    assert got.size == pytest.approx(jfk.size, abs=2)
    corr, offset = best_alignment(got[1600:-1600], jfk)
    # 8 kHz keeps only the band below 4 kHz of the 16 kHz original; Vorbis is lossy.
    assert corr > (0.9 if "8k" in name else 0.98), f"{name}: {corr:.4f}"
    assert abs(offset - 1600) <= 2
    assert audio_duration(path) == pytest.approx(11.0, abs=0.01)


@needs_sox
def test_stereo_is_averaged(jfk: np.ndarray, tmp_path: Path) -> None:
    path = tmp_path / "lr.wav"
    sox(JFK, "-r", "44100", "-e", "floating-point", "-b", "32", path, "remix", "1", "1v-0.5")
    got = load_audio(path)  # left = x, right = -0.5 x  ->  mean = 0.25 x
    gain = float(np.dot(got, jfk) / np.dot(jfk, jfk))
    assert gain == pytest.approx(0.25, abs=0.005)


def test_other_rates_are_honoured(jfk: np.ndarray) -> None:
    assert load_audio(JFK, sample_rate=8000).size == jfk.size // 2
    assert load_audio(JFK, sample_rate=48000).size == jfk.size * 3


# --- errors a user can cause -----------------------------------------------------------------


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _bad_files(tmp_path: Path, jfk: np.ndarray) -> dict[str, tuple[Path, str]]:
    wav = JFK.read_bytes()
    rng = np.random.default_rng(0)
    zero_len = tmp_path / "zero.wav"
    sf.write(zero_len, np.zeros(0, dtype=np.float32), 16000)
    return {
        "missing": (tmp_path / "nope.wav", "audio file not found"),
        "empty": (_write(tmp_path / "empty.mp3", b""), "empty file (0 bytes)"),
        "directory": (tmp_path, "directory"),
        "random bytes": (_write(tmp_path / "noise.wav", rng.bytes(50_000)), "cannot decode"),
        "text as mp3": (_write(tmp_path / "t.mp3", b"not audio at all\n" * 50), "cannot decode"),
        "torn header": (_write(tmp_path / "torn.wav", wav[:30]), "cannot decode"),
        "header only": (_write(tmp_path / "hdr.wav", wav[:44]), "zero-length audio"),
        "zero frames": (zero_len, "zero-length audio"),
        "video only": (
            encode(jfk, tmp_path / "silent.mp4", "mp4", None, video=True),
            "no audio track",
        ),
    }


BAD = [
    "missing",
    "empty",
    "directory",
    "random bytes",
    "text as mp3",
    "torn header",
    "header only",
    "zero frames",
    "video only",
]


@pytest.mark.parametrize("case", BAD)
def test_bad_files_give_one_line_audio_errors(case: str, jfk: np.ndarray, tmp_path: Path) -> None:
    path, expected = _bad_files(tmp_path, jfk)[case]
    for read in (load_audio, lambda p: list(iter_audio_chunks(p)), audio_duration):
        if read is audio_duration and case in ("header only", "zero frames"):
            assert audio_duration(path) is None  # readable header, nothing to time
            continue
        with pytest.raises(AudioError) as info:
            read(path)
        msg = str(info.value)
        assert expected in msg and "\n" not in msg and str(path) in msg, msg


def test_iter_audio_chunks_fails_eagerly_and_chunks_exactly(jfk: np.ndarray) -> None:
    with pytest.raises(AudioError):
        iter_audio_chunks(DATA / "missing.wav")  # before the first next()
    chunks = list(iter_audio_chunks(JFK, chunk_s=0.1))
    assert all(c.size == 1600 for c in chunks[:-1]) and 0 < chunks[-1].size <= 1600
    np.testing.assert_array_equal(np.concatenate(chunks), jfk)


@needs_sox
def test_long_file_streams_in_constant_memory(tmp_path: Path) -> None:
    """A 5-minute 48 kHz stereo FLAC (and 2-minute Opus) never exists decoded in one piece."""
    flac = tmp_path / "long.flac"
    sox(JFK, "-r", "48000", "-c", "2", flac, "repeat", "26")  # 27 x 11 s = 297 s
    opus = encode(
        load_audio(flac)[: 120 * 16000], tmp_path / "long.mkv", "matroska", "libopus", 48000
    )
    for path, seconds in ((flac, 297.0), (opus, 120.0)):
        tracemalloc.start()
        n = sum(c.size for c in iter_audio_chunks(path, chunk_s=0.5))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert n == pytest.approx(seconds * 16000, abs=0.05 * 16000)
        whole = seconds * 16000 * 4  # bytes of the decoded file at 16 kHz float32
        assert peak < whole / 4, f"{path.name}: peak {peak / 1e6:.1f} MB vs {whole / 1e6:.1f} MB"


# --- live resampling -------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_stream_resampler_matches_one_shot(rate: int) -> None:
    x = load_audio(JFK, sample_rate=rate)
    one_shot = resample(x, rate, 16000)
    rs = StreamResampler(rate)
    rng = np.random.default_rng(rate)
    out, i = [], 0
    while i < x.size:  # irregular chunks, like network frames
        n = int(rng.integers(1, 5000))
        out.append(rs.process(x[i : i + n]))
        i += n
    out.append(rs.flush())
    chunked = np.concatenate(out)
    assert chunked.size == one_shot.size == 176000
    np.testing.assert_allclose(chunked, one_shot, atol=1e-5)
    # After flush the resampler starts a new stream.
    again = np.concatenate([rs.process(x), rs.flush()])
    np.testing.assert_allclose(again, one_shot, atol=1e-5)


def test_stream_resampler_passthrough_and_downmix(jfk: np.ndarray) -> None:
    rs = StreamResampler(16000, 16000)
    assert rs.passthrough
    out = rs.process(jfk[:1600])
    np.testing.assert_array_equal(out, jfk[:1600])
    assert out is not jfk[:1600] and rs.flush().size == 0
    stereo = np.stack([jfk[:1600], np.zeros(1600, np.float32)], axis=1)
    np.testing.assert_allclose(rs.process(stereo), jfk[:1600] / 2)
    with pytest.raises(ValueError):
        StreamResampler(0)


# --- raw PCM from the wire -------------------------------------------------------------------


def test_pcm_s16le_and_f32le_round_trip(jfk: np.ndarray) -> None:
    s16 = pcm_to_float(float_to_pcm(jfk, "pcm_s16le"), "pcm_s16le", 1)
    np.testing.assert_allclose(s16, jfk, atol=1.5 / 32768)
    f32 = pcm_to_float(bytearray(float_to_pcm(jfk, "f32le")), "f32le", 1)
    np.testing.assert_array_equal(f32, jfk)
    assert s16.dtype == f32.dtype == np.float32
    assert pcm_to_float(b"", "pcm_s16le", 2).size == 0


def test_pcm_interleaved_channels_are_averaged() -> None:
    frames = np.array([[1000, 3000], [-2000, -4000]], dtype="<i2")  # 2 frames x (L, R)
    got = pcm_to_float(memoryview(frames.tobytes()), "pcm_s16le", 2)
    np.testing.assert_allclose(got, np.array([2000, -3000]) / 32768)
    assert got.dtype == np.float32


def test_pcm_rejects_torn_frames_and_bad_arguments() -> None:
    with pytest.raises(ValueError, match="whole number"):
        pcm_to_float(b"\x00" * 3, "pcm_s16le", 1)
    with pytest.raises(ValueError, match="whole number"):
        pcm_to_float(b"\x00" * 4, "pcm_s16le", 2 + 1)
    with pytest.raises(ValueError, match="whole number"):
        pcm_to_float(b"\x00" * 6, "f32le", 1)
    with pytest.raises(ValueError, match="unknown PCM format"):
        pcm_to_float(b"\x00" * 4, "mulaw", 1)
    with pytest.raises(ValueError, match="channels"):
        pcm_to_float(b"\x00" * 4, "f32le", 0)


def test_pcm_f32_from_untrusted_clients_is_sanitised() -> None:
    raw = np.array([np.nan, np.inf, -np.inf, 3.0, -2.0, 0.5], dtype="<f4").tobytes()
    np.testing.assert_array_equal(pcm_to_float(raw, "f32le", 1), [0, 0, 0, 1, -1, 0.5])


# --- clocks and pacing -----------------------------------------------------------------------


def test_simulated_clock_counts_audio_and_compute_not_waiting() -> None:
    fake = iter([10.0, 10.25])  # the timer measure() reads: 0.25 s of compute
    clock = SimulatedClock(timer=lambda: next(fake))
    clock.advance_audio(1.0)
    assert clock.now() == 1.0
    with clock.measure() as m:
        pass
    assert m.seconds == 0.25 and clock.now() == 1.25
    clock.advance_audio(0.1)  # audio up to 1.1 s is already there: compute is the bottleneck
    assert clock.now() == 1.25
    clock.charge(2.0)
    clock.advance_audio(0.1)
    assert clock.now() == pytest.approx(3.25)
    clock.wait_until(1.0)  # never backwards
    assert clock.now() == pytest.approx(3.25)
    clock.wait_until(5.0)
    assert clock.now() == 5.0
    with pytest.raises(ValueError):
        clock.charge(-1)


def test_paced_chunks_on_simulated_clock_is_instant_and_compute_aware(jfk: np.ndarray) -> None:
    clock = SimulatedClock()
    times = []
    for chunk in paced_chunks(jfk, 0.5, clock):
        times.append(clock.now())
        assert chunk.size <= 8000
    assert times[0] == 0.5 and times[-1] == pytest.approx(11.0)
    # A consumer that spends 0.8 s per 0.5 s chunk falls behind as it would live.
    clock = SimulatedClock()
    for _ in paced_chunks(jfk, 0.5, clock):
        clock.charge(0.8)
    assert clock.now() == pytest.approx(0.5 + 22 * 0.8)


def test_paced_chunks_with_real_clock_sleeps_until_each_chunk(jfk: np.ndarray) -> None:
    clock = RealClock()
    chunks = list(iter_audio_chunks(JFK, chunk_s=0.5))[:4]  # an iterable of chunks: 2 s audio
    start = time.perf_counter()
    arrivals = [time.perf_counter() - start for _ in paced_chunks(chunks, 0.5, clock, speed=10)]
    # Lower bounds only: sleep never returns early; no claim about how late.
    for k, t in enumerate(arrivals, start=1):
        assert t >= k * 0.05 - 0.002
    with clock.measure() as m:
        time.sleep(0.01)
    assert m.seconds >= 0.009
