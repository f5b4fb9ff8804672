"""scripts/make_hard_longform.py (`streamcap.evaluation.make_hard_longform`): utterances sped
up at the same pitch, joined by short gaps."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data"
SR = 16000


def _script() -> ModuleType:
    """The module behind scripts/make_hard_longform.py."""
    return importlib.import_module("streamcap.evaluation.make_hard_longform")


def _recording() -> tuple[np.ndarray, list[dict[str, object]]]:
    """Three real clips with 0.6 s of quiet noise between them, each clip one segment."""
    rng = np.random.default_rng(0)
    parts: list[np.ndarray] = []
    segments: list[dict[str, object]] = []
    pos = 0.6
    parts.append(rng.normal(0, 1e-3, round(0.6 * SR)).astype(np.float32))
    for name in ("en_real_praatio_mary", "en_real_goforward", "en_real_forever"):
        clip, rate = sf.read(DATA / f"{name}.wav", dtype="float32")
        assert rate == SR
        segments.append({"start": pos, "end": pos + len(clip) / SR, "text": name, "speaker": name})
        parts += [clip, rng.normal(0, 1e-3, round(0.6 * SR)).astype(np.float32)]
        pos += len(clip) / SR + 0.6
    return np.concatenate(parts), segments


def test_tempo_gaps_and_reference_times() -> None:
    mod = _script()
    audio, segments = _recording()
    out, segs = mod.build(audio, segments, tempo=1.3, gap=(0.1, 0.3), seed=3)
    assert out.dtype == np.float32 and out.ndim == 1
    assert [s["text"] for s in segs] == [s["text"] for s in segments]
    assert [s["speaker"] for s in segs] == [s["speaker"] for s in segments]
    for old, new in zip(segments, segs, strict=True):  # 1/1.3 as long
        ratio = (new["end"] - new["start"]) / (old["end"] - old["start"])  # type: ignore[operator]
        assert abs(ratio - 1 / 1.3) < 0.01
    gaps = [b["start"] - a["end"] for a, b in zip(segs, segs[1:], strict=False)]
    assert all(0.1 - 2e-3 <= g <= 0.3 + 2e-3 for g in gaps), gaps
    assert segs[0]["start"] > 0 and segs[-1]["end"] < len(out) / SR
    # The sped-up clips, the gaps, the lead-in and the tail make up the whole file.
    speech = sum(s["end"] - s["start"] for s in segs)
    expected = mod.LEAD_S + speech + sum(gaps) + 2 * mod.MARGIN_S / 1.3 + mod.TRAIL_S
    assert abs(len(out) / SR - expected) < 0.05
    # The speech is where the reference says: louder inside the segments than in the gaps.
    inside = np.concatenate([out[round(s["start"] * SR) : round(s["end"] * SR)] for s in segs])
    assert np.sqrt(np.mean(inside**2)) > 10 * np.sqrt(np.mean(out[: round(0.4 * SR)] ** 2))


def test_atempo_keeps_pitch() -> None:
    mod = _script()
    t = np.arange(2 * SR) / SR
    tone = (0.3 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    fast = mod.atempo(tone, 1.3)
    assert abs(len(fast) / len(tone) - 1 / 1.3) < 0.02
    middle = fast[SR // 10 : -SR // 10]
    peak = np.fft.rfftfreq(len(middle), 1 / SR)[np.argmax(np.abs(np.fft.rfft(middle)))]
    assert abs(peak - 440.0) < 5.0
