"""One language per stream (issue 20): detected once and kept, or per utterance (auto-each)."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from streamcap.audio import load_audio
from streamcap.core.captions import CaptionEvent
from streamcap.core.decode_types import DecodeResult
from streamcap.core.policy_window import DecodeRequest
from streamcap.runtime.clock import SimulatedClock
from streamcap.runtime.stream import (
    AUTO_EACH,
    LANGUAGE_MIN_PROB,
    LANGUAGE_MIN_SPEECH_S,
    LiveConfig,
    LiveStream,
    replay,
    split_language,
)
from streamcap.runtime.worker import DecodeJob, InferenceWorker, JobOutcome
from streamcap.server.protocol import parse_start

DATA = Path(__file__).resolve().parents[1] / "data"
SR = 16000


def _result(text: str, language: str | None, prob: float | None) -> DecodeResult:
    return DecodeResult((1,), text, language, 0.0, -0.1, "eot", language_prob=prob)


def _request(kind: str, seconds: float) -> DecodeRequest:
    return DecodeRequest(1, kind, 0, np.zeros(int(seconds * SR), np.float32), 0.0, seconds)  # type: ignore[arg-type]


def _stream(lock: bool = True) -> LiveStream:
    worker: Any = SimpleNamespace(engine=SimpleNamespace(multilingual=True))
    return LiveStream("t", worker, None, LiveConfig(lock_language=lock))


def test_split_language() -> None:
    assert split_language(None) == (None, True)
    assert split_language("de") == ("de", True)
    assert split_language(AUTO_EACH) == (None, False)


def test_partials_wait_for_the_language_and_a_final_locks_it() -> None:
    s = _stream()
    unsure = _result("שלום", "he", 0.5)
    assert s._lock_language(_request("partial", 5.0), unsure) is None  # not shown
    short = _result("hello", "en", 0.99)
    assert s._lock_language(_request("partial", LANGUAGE_MIN_SPEECH_S / 2), short) is None
    assert s.language is None
    final = _result("hello there", "en", 0.6)
    assert s._lock_language(_request("final", 1.0), final) is final
    assert s.language == "en"
    # a partial decoded with detection before the lock, in another language: not shown
    assert s._lock_language(_request("partial", 5.0), unsure) is None
    same = _result("hello", "en", None)
    assert s._lock_language(_request("partial", 5.0), same) is same


def test_a_sure_partial_locks_the_language() -> None:
    s = _stream()
    sure = _result("hello there", "en", LANGUAGE_MIN_PROB)
    assert s._lock_language(_request("partial", LANGUAGE_MIN_SPEECH_S), sure) is sure
    assert s.language == "en"


def test_auto_each_keeps_every_result_and_locks_nothing() -> None:
    s = _stream(lock=False)
    unsure = _result("hola", "es", 0.3)
    assert s._lock_language(_request("partial", 1.0), unsure) is unsure
    assert s._lock_language(_request("final", 1.0), unsure) is unsure
    assert s.language is None


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
    from streamcap.cli.common import _language, live_config

    assert _language("auto-each") == "auto-each"
    cfg = live_config("auto-each")
    assert cfg.language is None and not cfg.lock_language
    assert live_config(None).lock_language and live_config("de").language == "de"
