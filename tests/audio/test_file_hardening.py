"""Issue 35 (red team 2026-12-05, bug 9, bug 6, truncated FLAC): file audio meets the rules
wire audio meets. Real files written with libsndfile, decoded by the product's readers.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from streamcap.audio import (
    AudioError,
    audio_duration,
    iter_audio_chunks,
    load_audio,
    pcm_to_float,
)
from streamcap.audio.resample import MAX_BLOCK, resample_blocks

DATA = Path(__file__).resolve().parents[1] / "data"
JFK = DATA / "en_real_jfk.wav"  # 11.0 s, 16 kHz mono

#: What a client or a file can hold in float audio: NaN, infinities, out of range, normal.
HOSTILE = np.array([np.nan, np.inf, -np.inf, 2.0, -3.0, 0.5, -0.25, 0.0], dtype=np.float32)


def test_file_audio_is_sanitised_by_the_wire_rule(tmp_path: Path) -> None:
    """A float WAV at the pipeline's rate is read sample for sample, through the same rule as
    f32le from a client (`audio.pcm`): NaN and infinities 0, the rest clipped to [-1, 1]."""
    path = tmp_path / "hostile.wav"
    sf.write(path, np.tile(HOSTILE, 100), 16000, subtype="FLOAT")
    wire = pcm_to_float(np.tile(HOSTILE, 100).astype("<f4").tobytes(), "f32le", 1)
    np.testing.assert_array_equal(load_audio(path), wire)
    np.testing.assert_array_equal(np.concatenate(list(iter_audio_chunks(path))), wire)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_one_bad_sample_at_another_rate_stays_one_silent_sample(tmp_path: Path, bad: float) -> None:
    """Resampled, one NaN used to spread over the filter (NaN reached the model: bug 6), and
    inf became NaN; now the sample is 0 before resampling, and nothing else changes."""
    audio, _ = sf.read(JFK, dtype="float32")
    clean = tmp_path / "clean.wav"
    hostile = tmp_path / "hostile.wav"
    sf.write(clean, np.where(np.arange(audio.size) == 32000, 0.0, audio), 16000, "FLOAT")
    audio[32000] = bad
    sf.write(hostile, audio, 16000, subtype="FLOAT")
    for rate in (16000, 22050):
        got = load_audio(hostile, sample_rate=rate)
        assert np.isfinite(got).all()
        np.testing.assert_array_equal(got, load_audio(clean, sample_rate=rate))
        chunks = np.concatenate(list(iter_audio_chunks(hostile, sample_rate=rate)))
        assert np.isfinite(chunks).all()


def _wav_header(rate: int, data: bytes) -> bytes:
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, rate, 2 * rate, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", 36 + len(data))
        + b"WAVEfmt "
        + fmt
        + b"data"
        + (struct.pack("<I", len(data)) + data)
    )


def test_a_rate_below_the_floor_is_refused_before_decoding(tmp_path: Path) -> None:
    """The JFK clip's samples under a header claiming 1 Hz (49 h of "audio"): resampled at
    once per 65 536-sample block, it asked for 4.2 GB of float32 (bug 9)."""
    path = tmp_path / "onehz.wav"
    path.write_bytes(_wav_header(1, JFK.read_bytes()[44:]))
    for read in (load_audio, audio_duration, iter_audio_chunks):
        with pytest.raises(AudioError) as err:
            read(path)
        message = str(err.value)
        assert "1 Hz" in message and "8000 Hz" in message and str(path) in message, message
    path.write_bytes(_wav_header(8000, JFK.read_bytes()[44:]))  # the floor itself: fine
    assert audio_duration(path) == pytest.approx(22.0)


@pytest.mark.parametrize("in_rate", [8000.0, 100.0, 1.0])
def test_resampled_blocks_are_bounded_whatever_the_ratio(in_rate: float) -> None:
    """Each block out of the file resampler is at most `MAX_BLOCK` samples, even at a ratio the
    floor no longer lets through (16 000 : 1), and together they are the whole signal."""
    block = np.sin(np.arange(1024, dtype=np.float32) / 7.0)
    sizes = [len(b) for b in resample_blocks(iter([(block, in_rate)] * 2), 16000)]
    assert max(sizes) <= MAX_BLOCK
    assert sum(sizes) == pytest.approx(2 * 1024 * 16000 / in_rate, abs=2)


def test_a_truncated_flac_gives_what_decoded_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A FLAC cut at half its size: libsndfile stops with "flac decoder lost sync", and the
    whole file was refused; WAV and MP3 cut the same way give what is there."""
    audio, rate = sf.read(JFK, dtype="float32")
    whole = tmp_path / "whole.flac"
    sf.write(whole, audio, rate)
    cut = tmp_path / "cut.flac"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with caplog.at_level(logging.WARNING, logger="streamcap.audio"):
        got = np.concatenate(list(iter_audio_chunks(cut)))
    assert 4 * rate < got.size < audio.size  # about half of the 11 s
    # the samples before the damage are the file's, exactly (FLAC is lossless)
    np.testing.assert_allclose(got, audio[: got.size], atol=1e-4)
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert str(cut) in warning.getMessage() and "lost sync" in warning.getMessage()
    loaded = load_audio(cut)
    np.testing.assert_array_equal(loaded, got)
    whole.write_bytes(whole.read_bytes()[:200])  # nothing decodable: still an error
    with pytest.raises(AudioError):
        list(iter_audio_chunks(whole))
