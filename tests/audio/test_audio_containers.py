"""AAC in the containers people get it in decodes to the very audio that was encoded (issue 23).

An AAC stream starts with encoder priming and pads its last frame. A decoder that keeps either
shifts or lengthens the audio against the WAV it was made from: subtitle times drift and a final's
end differs. The files are made during the test with FFmpeg's real AAC encoder (PyAV), from the
16 kHz JFK clip, as a phone or camera writes them (44.1/48 kHz stereo, a video track) and at
16 kHz mono; then decoded back and compared sample for sample, and transcribed by the real
``streamcap transcribe`` command next to the WAV.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from audiokit import JFK, encode
from clikit import run

from streamcap.audio import iter_audio_chunks, load_audio

SR = 16000

CONTAINERS = {
    # name: (container, rate, layout, video track, the container records the exact duration)
    "mp4_camera": ("mp4", 44100, "stereo", True, True),
    "mp4_phone": ("mp4", 48000, "stereo", False, True),
    "mp4_16k_mono": ("mp4", 16000, "mono", False, True),
    "m4a": ("ipod", 44100, "stereo", False, True),
    "aac_adts": ("adts", 44100, "stereo", False, False),
    "ts_broadcast": ("mpegts", 48000, "stereo", False, False),
}


@pytest.fixture(scope="module")
def original() -> np.ndarray:
    audio, rate = sf.read(JFK, dtype="float32")
    assert rate == SR
    return audio


def lag_of(got: np.ndarray, ref: np.ndarray) -> int:
    """Samples by which ``got`` lags ``ref`` (cross-correlation peak, FFT)."""
    n = min(got.size, ref.size)
    size = 1 << int(np.ceil(np.log2(2 * n)))
    xc = np.fft.irfft(np.fft.rfft(got[:n], size) * np.conj(np.fft.rfft(ref[:n], size)), size)
    k = int(np.argmax(xc))
    return k if k < size // 2 else k - size


@pytest.mark.parametrize("name", sorted(CONTAINERS))
def test_aac_decodes_aligned_with_the_original(
    name: str, original: np.ndarray, tmp_path: Path
) -> None:
    container, rate, layout, video, exact = CONTAINERS[name]
    ext = {"ipod": "m4a", "adts": "aac", "mpegts": "ts"}.get(container, container)
    path = encode(original, tmp_path / f"jfk.{ext}", container, "aac", rate, layout, video)
    got = load_audio(path)
    # Priming left in lagged by 1024 samples at the codec's rate: 372 here at 44.1 kHz, 341 at
    # 48 kHz, with a correlation of -0.03 at lag 0.
    assert abs(lag_of(got, original)) <= 1, name
    n = min(got.size, original.size)
    corr = float(np.corrcoef(got[:n], original[:n])[0, 1])
    assert corr > 0.99, f"{name}: correlation {corr:.4f} at lag 0"
    if exact:  # the last frame's padding is cut at the track's duration: 11.000 s, not 11.008
        assert abs(got.size - original.size) <= 1, got.size
    else:  # no exact end recorded: at most one AAC frame of padding remains
        assert 0 <= got.size - original.size <= 1024 * SR // rate + 1, got.size
    streamed = np.concatenate(list(iter_audio_chunks(path, chunk_s=0.37)))
    assert streamed.size == got.size
    np.testing.assert_allclose(streamed, got, atol=1e-6)


def test_a_camera_mp4_transcribes_like_its_wav(original: np.ndarray, tmp_path: Path) -> None:
    """The real command on the WAV and on an MP4 video made from it: the same finals, split
    at the same places, with the same times (a final's end moved by the AAC padding before)."""
    container, rate, layout, video, _ = CONTAINERS["mp4_camera"]
    mp4 = encode(original, tmp_path / "jfk.mp4", container, "aac", rate, layout, video)
    wav = tmp_path / "jfk_wav.wav"
    wav.write_bytes(JFK.read_bytes())
    out = tmp_path / "out"
    res = run("transcribe", str(wav), str(mp4), "--language", "en", "-o", str(out),
              "--format", "jsonl")  # fmt: skip
    assert res.returncode == 0, res.stderr

    def finals(stem: str) -> list[dict[str, object]]:
        lines = (out / f"{stem}.jsonl").read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["type"] == "final"]

    a, b = finals("jfk_wav"), finals("jfk")
    assert a and [e["text"] for e in a] == [e["text"] for e in b]
    for x, y in zip(a, b, strict=True):
        assert x["start"] == pytest.approx(y["start"], abs=0.002)
        assert x["end"] == pytest.approx(y["end"], abs=0.002)
        wx, wy = x["words"], y["words"]
        assert isinstance(wx, list) and isinstance(wy, list) and len(wx) == len(wy)
        for u, v in zip(wx, wy, strict=True):
            assert u["word"] == v["word"]
            # a word after a long pause may start where the silence ends or a few 20 ms
            # alignment frames later ("ask" at 3.18 s in the WAV, 3.02 s in the MP4)
            assert u["start"] == pytest.approx(v["start"], abs=0.2)
            assert u["end"] == pytest.approx(v["end"], abs=0.05)
