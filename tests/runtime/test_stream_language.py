"""One language per stream (issue 20): detected once and kept, or per utterance (auto-each),
with the bundled model; the rules alone: tests/core/test_stream_protocol.py."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamcap.audio import load_audio
from streamcap.core.captions import CaptionEvent
from streamcap.core.live_config import AUTO_EACH, LiveConfig, split_language
from streamcap.runtime.clock import SimulatedClock
from streamcap.runtime.jobs import DecodeJob, JobOutcome
from streamcap.runtime.replay import replay
from streamcap.runtime.stream import LiveStream
from streamcap.runtime.worker import InferenceWorker
from streamcap.server.protocol import parse_start

DATA = Path(__file__).resolve().parents[1] / "data"
SR = 16000


def test_split_language() -> None:
    assert split_language(None) == (None, True)
    assert split_language("de") == ("de", True)
    assert split_language(AUTO_EACH) == (None, False)


def test_start_message_accepts_auto_each() -> None:
    base = '{"type": "start", "sample_rate": 16000, "format": "pcm_s16le", "language": %s}'
    assert parse_start(base % '"auto-each"').language == AUTO_EACH
    assert parse_start(base % "null").language is None
    assert parse_start(base % '"de"').language == "de"


def _latin(text: str) -> bool:
    return all(not c.isalpha() or unicodedata.name(c, "").startswith("LATIN") for c in text)


def _run(engine: Any, config: LiveConfig) -> tuple[list[tuple[CaptionEvent, str | None]], Any]:
    jfk = load_audio(DATA / "en_real_jfk.wav")
    mary = load_audio(DATA / "en_real_praatio_mary.wav")
    audio = np.concatenate([jfk, np.zeros(2 * SR, np.float32), mary])
    stream = LiveStream("t", InferenceWorker(engine), None, config, SimulatedClock())
    events: list[tuple[CaptionEvent, str | None]] = []
    stream.on_caption = lambda ev: events.append((ev, stream.language))
    decodes: list[tuple[DecodeJob, JobOutcome]] = []
    stream.decode_observer = lambda job, out: decodes.append((job, out))
    replay(stream, audio)
    return events, (stream, decodes)


@pytest.mark.model
def test_english_stream_detects_once_and_keeps_english(engine: Any) -> None:
    events, (stream, decodes) = _run(engine, LiveConfig(language=None))
    shown = [ev for ev, _ in events if ev.text]
    assert any(ev.type == "final" for ev in shown)
    assert all(_latin(ev.text) for ev in shown), [ev.text for ev in shown]
    assert all(lang == "en" for ev, lang in events if ev.text)  # from the first caption
    assert stream.language == "en"
    results = [o.result for _, o in decodes if o.result is not None and o.result.text.strip()]
    assert all(r.language == "en" for r in results)
    # once locked, every later decode is told the language instead of detecting it
    locked_at = next(i for i, (_, o) in enumerate(decodes) if o.options and o.options.language)
    assert all(o.options is not None and o.options.language == "en" for _, o in decodes[locked_at:])


@pytest.mark.model
def test_auto_each_detects_in_every_decode(engine: Any) -> None:
    events, (stream, decodes) = _run(engine, LiveConfig(language=None, lock_language=False))
    assert any(ev.type == "final" and ev.text for ev, _ in events)
    assert stream.language is None
    assert decodes and all(o.options is not None and o.options.language is None for _, o in decodes)
    finals = [o.result for j, o in decodes if j.kind == "final" and o.result is not None]
    assert any(r.language == "en" and r.language_prob is not None for r in finals)


@pytest.mark.model
def test_transcribe_detects_once_per_file(engine: Any) -> None:
    from streamcap.runtime.transcribe import TranscribeOptions, Transcription

    run = Transcription(engine, DATA / "en_real_jfk.wav", TranscribeOptions())
    finals = list(run)
    assert finals and run.language == "en"
    each = Transcription(engine, DATA / "en_real_jfk.wav", TranscribeOptions(lock_language=False))
    assert list(each) and each.language is None


def test_cli_language_auto_each() -> None:
    from streamcap.cli.live_options import live_config
    from streamcap.cli.model_options import _language

    assert _language("auto-each") == "auto-each"
    cfg = live_config("auto-each")
    assert cfg.language is None and not cfg.lock_language
    assert live_config(None).lock_language and live_config("de").language == "de"
