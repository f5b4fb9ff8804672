"""An inference engine is a port with a registry (`streamcap.runtime.engine_api`,
`streamcap.runtime.engines`): a new one is its module, one `register_engine` call and its test.
The example is the plain greedy engine of tests/plain_engine.py (no drafter at all): registered
here, the command line offers it, its factory loads it, and the worker, a live stream, the
warm-up and offline transcription run on it, every final exact (the exactness contract holds
for the new engine too)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from plain_engine import plain_engine_from

from streamcap.errors import user_message
from streamcap.runtime.engines import (
    _REGISTRY,
    EngineOptions,
    UnknownEngine,
    engine_names,
    make_engine,
    register_engine,
)

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def plain() -> Iterator[None]:
    register_engine("plain", plain_engine_from, about="greedy, no drafts")
    try:
        yield
    finally:
        _REGISTRY.pop("plain", None)


def _parse(*argv: str) -> Any:
    from streamcap.cli import build_parser

    return build_parser().parse_args(list(argv))


def test_a_registered_engine_is_listed_after_the_default(plain: None) -> None:
    assert engine_names() == ("transformers", "plain")


def test_an_unknown_engine_names_the_registered_ones(plain: None) -> None:
    with pytest.raises(UnknownEngine) as caught:
        make_engine("nope", EngineOptions())
    assert user_message(caught.value) == "unknown engine 'nope': one of transformers, plain"


def test_engine_choices_come_from_the_registry(
    plain: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name registered at run time is an --engine choice (and in --help), with no list of
    names in the command line; the default is transformers; a name nobody registered is
    argparse's usage error."""
    from streamcap.cli.model_options import ModelOptions
    from streamcap.cli.transcribe import TranscribeCommand

    cmd = TranscribeCommand.from_args(_parse("transcribe", "a.wav", "--engine", "plain"))
    assert cmd.model.engine == "plain"
    assert cmd.model.engine_options == EngineOptions(model=cmd.model.model)
    assert TranscribeCommand.from_args(_parse("transcribe", "a.wav")).model == ModelOptions()
    assert ModelOptions().engine == "transformers"
    with pytest.raises(SystemExit):
        _parse("transcribe", "a.wav", "--engine", "nope")
    said = capsys.readouterr().err  # the choices are quoted from Python 3.12.8 on
    assert re.search(
        r"--engine: invalid choice: 'nope' \(choose from '?transformers'?, '?plain'?\)", said
    )
    with pytest.raises(SystemExit):
        _parse("serve", "--help")
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--engine {transformers,plain}" in help_text
    assert "plain (greedy, no drafts)" in help_text


def test_bench_refuses_another_engine_before_loading_it(plain: None) -> None:
    """`bench` measures the transformers engine's own decoders (drafters, `generate`)."""
    from streamcap.cli.common import UsageError
    from streamcap.cli.model_options import ModelOptions, transformers_engine

    with pytest.raises(UsageError, match="bench measures the transformers engine, not --engine"):
        transformers_engine(ModelOptions(engine="plain"), "bench")


@pytest.mark.model
def test_the_worker_and_a_live_stream_run_on_the_plain_engine_exactly(plain: None) -> None:
    """The bundled model through the command line's engine factory, on the plain engine: JFK
    replayed on the simulated clock gives its words, and every final's tokens are plain greedy
    `generate`'s on the same audio and options (`decoding.reference`), none drafted."""
    import torch
    from plain_engine import PlainEngine

    from streamcap.audio import load_audio
    from streamcap.cli.model_options import ModelOptions, load_engine
    from streamcap.core.decode_types import DecodingOptions
    from streamcap.core.live_config import LiveConfig
    from streamcap.decoding.reference import reference_decode
    from streamcap.runtime.batching import can_batch
    from streamcap.runtime.clock import SimulatedClock
    from streamcap.runtime.jobs import DecodeJob, JobOutcome
    from streamcap.runtime.replay import replay
    from streamcap.runtime.stream import LiveStream
    from streamcap.runtime.transcribe import TranscribeOptions, Transcription
    from streamcap.runtime.worker import InferenceWorker

    torch.set_num_threads(2)
    engine = load_engine(ModelOptions(model="base", device="cpu", engine="plain"))
    assert isinstance(engine, PlainEngine) and not can_batch(engine)
    worker = InferenceWorker(engine)
    assert worker.warm_up("en") > 0  # a final's cost, measured on the port
    stream = LiveStream("p", worker, None, LiveConfig(language="en"), SimulatedClock())
    finals: list[str] = []
    stream.on_caption = lambda ev: finals.append(ev.text) if ev.type == "final" else None
    decodes: list[tuple[DecodeJob, JobOutcome]] = []
    stream.decode_observer = lambda job, out: decodes.append((job, out))
    replay(stream, load_audio(DATA / "en_real_jfk.wav"))

    assert "ask not what your country" in " ".join(finals).lower()
    assert any(job.kind == "partial" for job, _ in decodes)
    assert all(o.error is None and o.result is not None for _, o in decodes)
    assert all(o.result is not None and o.result.stats.drafted == 0 for _, o in decodes)
    final_jobs = [(j, o) for j, o in decodes if j.kind == "final" and o.result is not None]
    assert final_jobs
    for job, out in final_jobs:
        assert out.options is not None and out.result is not None
        enc = engine.inner.encode(job.audio)
        ref, _ = reference_decode(engine.inner.decoder, enc.enc, out.options, enc.duration_s)
        assert tuple(ref) == out.result.tokens
        assert out.result.words  # finals' words timed through the port's `align`

    options = TranscribeOptions(decoding=DecodingOptions(language="en"))
    offline = list(Transcription(engine, DATA / "en_real_jfk.wav", options))
    assert "ask not what your country" in " ".join(c.text for c in offline).lower()
    assert all(c.words for c in offline)
