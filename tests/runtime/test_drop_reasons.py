"""No voiced utterance disappears silently: why the guard drops a decode, counted and logged."""

from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path

import pytest

from streamcap.core.decode_types import DecodeResult
from streamcap.core.text import (
    DROP_REASONS,
    GuardConfig,
    describe_drop,
    drop_reason,
    is_hallucination,
    result_words,
)

DATA = Path(__file__).resolve().parents[1] / "data"
GUARD = GuardConfig()


def _result(
    text: str = "go forward ten meters",
    no_speech: float = 0.05,
    logprob: float | None = -0.3,
    stopped_by: str = "eot",
) -> DecodeResult:
    return DecodeResult((1, 2, 3), text, "en", no_speech, logprob, stopped_by)


# --------------------------------------------------------------------------- pure


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (_result(), None),
        (_result(no_speech=0.71, logprob=-1.2), "no_speech"),
        (_result(no_speech=0.6, logprob=-1.0), "no_speech"),  # both bounds inclusive
        (_result(no_speech=0.9, logprob=None), "no_speech"),  # no tokens: unsure
        (_result(no_speech=0.9, logprob=-0.5), None),  # confident text wins
        (_result(no_speech=0.59, logprob=-1.4), None),
        (_result(logprob=-1.6), "logprob"),
        (_result(logprob=-1.5), None),
        (_result("Thank you.", no_speech=0.25), "silence_phrase"),
        (_result("Thank you.", no_speech=0.1), None),  # people do say it
        (_result(""), "empty"),
        (_result("  "), "empty"),
        (_result("", no_speech=0.8, logprob=-1.3), "no_speech"),  # the first rule that fits
        (_result(no_speech=math.nan, logprob=-3.0), None),  # no probability: words decide
        (_result("", no_speech=math.nan), "empty"),
        (_result("yes " * 12, stopped_by="loop"), None),  # a loop is trimmed, not dropped
    ],
)
def test_drop_reason(result: DecodeResult, reason: str | None) -> None:
    assert drop_reason(result, GUARD) == reason
    assert is_hallucination(result, GUARD) is (reason is not None)
    assert reason is None or reason in DROP_REASONS
    if reason is not None:
        assert result_words(result, GUARD) == []
    else:
        assert result_words(result, GUARD)


def test_thresholds_are_the_guards() -> None:
    r = _result(no_speech=0.3, logprob=-0.8)
    assert drop_reason(r, GUARD) is None
    assert drop_reason(r, GuardConfig(no_speech_threshold=0.3, logprob_threshold=-0.5)) == (
        "no_speech"
    )
    assert drop_reason(r, GuardConfig(min_avg_logprob=-0.5)) == "logprob"


def test_describe_drop() -> None:
    r = _result("Thanks for watching!", no_speech=0.71, logprob=-1.2)
    line = describe_drop("no_speech", r)
    assert line == "no_speech: p=0.71, avg_logprob=-1.20, text='Thanks for watching!'"
    assert "avg_logprob=none" in describe_drop("no_speech", _result(logprob=None))
    assert len(describe_drop("empty", _result("word " * 50))) < 120
    assert describe_drop("not_decoded", None) == "not_decoded"


def test_guard_flags_on_every_captioning_command() -> None:
    from streamcap.cli import build_parser
    from streamcap.cli.live_options import guard_from_args, live_config

    parser = build_parser()
    for command in ("transcribe", "dictate", "serve"):
        extra = ["f.wav"] if command == "transcribe" else []
        args = parser.parse_args([command, *extra])
        assert guard_from_args(args) == GuardConfig()  # defaults unchanged
        args = parser.parse_args(
            [command, *extra, "--no-speech-threshold", "0.4", "--logprob-threshold", "-0.7",
             "--min-avg-logprob", "-2"]
        )  # fmt: skip
        guard = guard_from_args(args)
        assert guard == GuardConfig(0.4, -0.7, -2.0, GUARD.phrase_no_speech_threshold)
        assert live_config(guard=guard).policy.guard == guard
        sub = next(a for a in parser._actions if a.dest == "command")
        assert isinstance(sub, argparse._SubParsersAction)
        text = sub.choices[command].format_help()
        assert "--no-speech-threshold" in text and "default: 0.6" in text


def test_metrics_list_every_reason() -> None:
    from streamcap.server.metrics import ServerMetrics

    body = ServerMetrics().render().decode()
    for reason in (*DROP_REASONS, "not_decoded"):
        assert f'streamcap_finals_dropped_total{{reason="{reason}"}}' in body


# --------------------------------------------------------------------------- real model


def test_transcribe_counts_and_logs_each_drop(engine, caplog: pytest.LogCaptureFixture) -> None:  # noqa: ANN001
    """Real speech with thresholds no decode passes (every no-speech probability is >= 0 and
    every average log-probability <= 0): each utterance is dropped, counted and logged."""
    from streamcap.runtime.transcribe import TranscribeOptions, Transcription

    path = DATA / "en_real_goforward.wav"
    kept = list(Transcription(engine, path, TranscribeOptions(word_timestamps=False)))
    assert kept and "forward" in " ".join(c.text for c in kept).lower()

    guard = GuardConfig(no_speech_threshold=0.0, logprob_threshold=0.0)
    job = Transcription(engine, path, TranscribeOptions(guard=guard, word_timestamps=False))
    with caplog.at_level(logging.INFO, logger="streamcap.runtime.transcribe"):
        assert list(job) == []
    assert job.drops == {"no_speech": len(kept)}
    lines = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(lines) == len(kept)
    assert lines[0].startswith("stream file: final #0 ")
    assert "dropped (no_speech: p=" in lines[0] and "forward" in lines[0].lower()


def test_live_stream_counts_and_logs_each_drop(engine, caplog: pytest.LogCaptureFixture) -> None:  # noqa: ANN001
    import soundfile as sf

    from streamcap.core.live_config import LiveConfig
    from streamcap.core.policy_config import PolicyConfig
    from streamcap.core.policy_window import DroppedFinal
    from streamcap.runtime.clock import SimulatedClock
    from streamcap.runtime.replay import replay
    from streamcap.runtime.stream import LiveStream
    from streamcap.runtime.worker import InferenceWorker

    audio, _ = sf.read(DATA / "en_real_goforward.wav", dtype="float32")
    guard = GuardConfig(no_speech_threshold=0.0, logprob_threshold=0.0)
    config = LiveConfig(language="en", policy=PolicyConfig(guard=guard))
    told: list[DroppedFinal] = []
    stream = LiveStream(
        "s1", InferenceWorker(engine), None, config, SimulatedClock(), None, told.append
    )
    with caplog.at_level(logging.INFO, logger="streamcap.runtime.stream"):
        replay(stream, audio)
    assert stream.protocol.committed_text == ""
    n = stream.protocol.drops.get("no_speech", 0)
    assert n >= 1 and sum(stream.protocol.drops.values()) == n
    assert [d.reason for d in told] == ["no_speech"] * n  # each told to the owner (metrics)
    lines = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(lines) == n
    assert lines[0].startswith("stream s1: final #1 ")
    assert " s dropped (no_speech: p=" in lines[0]
