"""Word times from the decoder's cross-attention (`decoding.alignment`, `Engine.align`).

Real bundled Whisper base on real speech: the words spell the text, their times are ordered
and inside the window, the tokens are untouched (and still `generate`'s), and on recorded
utterances of lf3 with a second of room either side the first word starts and the last word
ends within 0.3 s of the reference segment. Then the worker (finals only, single and batched
paths) and the offline SRT / JSONL output timed by the words.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from streamcap.core.decode_types import DecodeResult, DecodingOptions
from streamcap.decoding.alignment import Aligner, alignment_heads, dtw, median_filter
from streamcap.decoding.reference import reference_decode
from streamcap.decoding.step import DecoderStep

DATA = Path(__file__).resolve().parents[1] / "data"
LF3 = Path("/work/shared/eval-dev/longform/lf3_real_dev")
EN = DecodingOptions(language="en")
SR = 16000
#: Short lf3 utterances with more than 1 s of pause on both sides (#51 is not: its reference
#: end lies 0.6 s into silence; #4 is misheard).
LF3_SEGMENTS = [5, 16, 18, 21, 31, 37]


def _check_words(result: DecodeResult, duration_s: float) -> None:
    words = result.words
    assert words, result.text
    assert "".join(w.word for w in words).split() == result.text.split()
    last = 0.0
    for w in words:
        assert 0.0 <= last <= w.start <= w.end <= duration_s, words
        assert 0.0 < w.probability <= 1.0
        last = w.end


# --------------------------------------------------------------------------- pure pieces


def test_dtw_and_median_filter_agree_with_transformers() -> None:
    gw = pytest.importorskip("transformers.models.whisper.generation_whisper")
    rng = np.random.default_rng(0)
    for shape in [(1, 1), (3, 40), (12, 90), (30, 25), (7, 7)]:
        x = rng.normal(size=shape)
        got = dtw(x)
        want = gw._dynamic_time_warping(x)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), shape
    w = torch.randn(4, 9, 60)
    assert torch.equal(median_filter(w, 7), gw._median_filter(w, 7))


def test_alignment_heads_of_the_bundled_model(engine: Any) -> None:
    # converted from CTranslate2's config: openai-whisper's table for base
    heads = alignment_heads(engine.main.model)
    assert heads == [(3, 1), (4, 2), (4, 3), (4, 7), (5, 1), (5, 2), (5, 4), (5, 6)]


# --------------------------------------------------------------------------- real model


@pytest.mark.model
@pytest.mark.parametrize("clip", ["en_real_jfk", "en_real_librivox_0870"])
def test_words_spell_the_text_and_tokens_stay_generates(
    engine: Any, speech: dict[str, np.ndarray], clip: str
) -> None:
    enc = engine.encode(speech[clip])
    result = engine.decode(enc, EN)
    aligned = engine.align(enc, EN, result)
    assert aligned.tokens == result.tokens and aligned.text == result.text
    assert aligned.avg_logprob == result.avg_logprob
    ref, _ = reference_decode(engine.decoder, enc.enc, EN, enc.duration_s)
    assert list(aligned.tokens) == ref
    _check_words(aligned, enc.duration_s)
    # the words' probabilities come from the decode's own logits: their log-mean tracks it
    assert result.avg_logprob is not None
    assert max(w.probability for w in aligned.words) > 0.9


@pytest.mark.model
def test_prompt_detected_language_and_short_context(
    engine: Any, speech: dict[str, np.ndarray]
) -> None:
    audio = speech["en_real_forever"]
    enc = engine.encode(audio)
    prompted = DecodingOptions(language="en", prompt_ids=engine.text_to_ids("Days, forever."))
    for opts in (prompted, DecodingOptions(language=None)):
        result = engine.align(enc, opts, engine.decode(enc, opts))
        _check_words(result, enc.duration_s)
    short = engine.encode(audio, context_s=len(audio) / SR + 1.0)  # a partial's context
    assert short.enc.shape[1] < 1500
    _check_words(engine.align(short, EN, engine.decode(short, EN)), short.duration_s)
    empty = DecodeResult((), "", "en", 0.9, None, "eot")
    assert engine.align(enc, EN, empty).words == ()


@pytest.mark.model
def test_half_precision_decoders_give_the_same_words(
    engine: Any, speech: dict[str, np.ndarray]
) -> None:
    """bf16 / fp16 decoders (CUDA's precisions) align the fp32 decode's tokens: the attention
    softmax runs in fp32, so the words' times barely move."""
    enc = engine.encode(speech["en_real_praatio_mary"])
    result = engine.align(enc, EN, engine.decode(enc, EN))
    prefix = engine.spec.prefix(engine.spec.language_id("en"), EN)
    # a step without the lean layers (transformers' own forward): the aligner runs them itself
    plain = DecoderStep(engine.main.model, engine.spec, "cpu", torch.float32, lean=False)
    words = Aligner(engine.main.model, plain, engine.spec).align(
        enc.enc, prefix, result.tokens, enc.duration_s, "en", enc.features
    )
    assert words == result.words
    for dtype in (torch.bfloat16, torch.float16):
        half = copy.deepcopy(engine.main.model).to(dtype)
        step = DecoderStep(half, engine.spec, "cpu", dtype, screen=False)
        words = Aligner(half, step, engine.spec).align(
            enc.enc.to(dtype), prefix, result.tokens, enc.duration_s, "en", enc.features
        )
        assert [w.word for w in words] == [w.word for w in result.words], dtype
        for a, b in zip(words, result.words, strict=True):
            assert abs(a.start - b.start) <= 0.1 and abs(a.end - b.end) <= 0.1, (dtype, a, b)
            assert abs(a.probability - b.probability) < 0.1


@pytest.mark.cuda
@pytest.mark.model
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_words_on_cuda_in_fp16(speech: dict[str, np.ndarray]) -> None:
    from streamcap.runtime.engine import Engine

    gpu = Engine("base", device="cuda")
    assert gpu.precision == "fp16"
    for clip in ("en_real_jfk", "en_real_praatio_mary"):
        enc = gpu.encode(speech[clip])
        result = gpu.decode(enc, EN)
        aligned = gpu.align(enc, EN, result)
        assert aligned.tokens == result.tokens
        _check_words(aligned, enc.duration_s)


@pytest.fixture(scope="module")
def lf3() -> tuple[np.ndarray, list[dict[str, Any]]]:
    import soundfile as sf

    if not LF3.with_suffix(".wav").exists():
        pytest.skip("the shared lf3 evaluation recording is not on this machine")
    audio, rate = sf.read(LF3.with_suffix(".wav"), dtype="float32")
    assert rate == SR
    return audio, json.loads(LF3.with_suffix(".json").read_text())["segments"]


@pytest.mark.model
@pytest.mark.parametrize("index", LF3_SEGMENTS)
def test_first_and_last_word_match_the_reference_segment(
    engine: Any, lf3: tuple[np.ndarray, list[dict[str, Any]]], index: int
) -> None:
    audio, segments = lf3
    seg = segments[index]
    assert seg["start"] - segments[index - 1]["end"] > 1.0
    assert segments[index + 1]["start"] - seg["end"] > 1.0
    t0 = seg["start"] - 1.0
    window = audio[round(t0 * SR) : round((seg["end"] + 1.0) * SR)]
    enc = engine.encode(window)
    result = engine.align(enc, EN, engine.decode(enc, EN))
    _check_words(result, enc.duration_s)
    start_err = result.words[0].start + t0 - seg["start"]
    end_err = result.words[-1].end + t0 - seg["end"]
    print(f"lf3 #{index} {seg['text']!r}: start {start_err:+.2f} s, end {end_err:+.2f} s")
    assert abs(start_err) <= 0.3 and abs(end_err) <= 0.3, (start_err, end_err, result.words)


# --------------------------------------------------------------------------- worker


@pytest.mark.model
def test_worker_times_words_of_finals_not_partials(
    engine: Any, speech: dict[str, np.ndarray]
) -> None:
    from streamcap.runtime.batching import BatchRunner
    from streamcap.runtime.costs import CostModel, CostModelConfig
    from streamcap.runtime.jobs import DecodeJob, JobOutcome
    from streamcap.runtime.worker import InferenceWorker

    audio = speech["en_real_praatio_mary"]
    got: list[JobOutcome] = []

    def done(job: DecodeJob, outcome: JobOutcome) -> None:
        got.append(outcome)

    w = InferenceWorker(engine)
    w.submit(DecodeJob("a", "partial", 1, audio[: 2 * SR], done, EN, context_s=3.0))
    w.submit(DecodeJob("b", "final", 1, audio, done, EN, word_timestamps=True))
    w.run_pending()  # finals first
    final, partial = got
    assert final.result is not None and partial.result is not None
    _check_words(final.result, len(audio) / SR)
    assert partial.result.tokens and partial.result.words == ()
    assert final.compute_s > final.encoder_s + final.decoder_s  # the pass is counted in
    # the batched path: two finals decoded together, each with its words
    jobs = [DecodeJob(s, "final", 2, audio, done, EN, word_timestamps=True) for s in "cd"]
    outcomes = [JobOutcome(), JobOutcome()]
    runner = BatchRunner(engine, CostModel(CostModelConfig(max_batch=2)))
    runner.run(jobs, [(EN, None), (EN, None)], outcomes)
    for out in outcomes:
        assert out.result is not None and out.result.tokens == final.result.tokens
        assert out.result.words == final.result.words


def test_live_decodes_ask_for_words_when_the_policy_does() -> None:
    from streamcap.core.live_config import LiveConfig
    from streamcap.core.policy_window import DecodeRequest
    from streamcap.core.stream import StreamProtocol

    audio = np.zeros(SR, np.float32)
    for config, want in ((LiveConfig(), True), (LiveConfig(word_timestamps=False), False)):
        proto = StreamProtocol(config)
        final = proto._order(DecodeRequest(1, "final", 1, audio, 0.0, 1.0, words=True))
        partial = proto._order(DecodeRequest(2, "partial", 1, audio, 0.0, 1.0))
        committing = proto._order(DecodeRequest(3, "partial", 1, audio, 0.0, 1.0, words=True))
        assert final.word_timestamps is want and partial.word_timestamps is False
        assert committing.word_timestamps is want


# --------------------------------------------------------------------------- offline output


def _srt_cues(text: str) -> list[tuple[float, float, str]]:
    def secs(t: str) -> float:
        h, m, s = t.replace(",", ".").split(":")
        return int(h) * 3600 + int(m) * 60 + float(s)

    cues = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        a, b = re.fullmatch(r"(\S+) --> (\S+)", lines[1]).groups()  # type: ignore[union-attr]
        cues.append((secs(a), secs(b), " ".join(lines[2:])))
    return cues


@pytest.mark.model
def test_offline_srt_cues_are_cut_where_the_words_are(engine: Any, tmp_path: Path) -> None:
    import io

    from streamcap.cues import split_cues
    from streamcap.formats import JsonlWriter, SrtWriter
    from streamcap.runtime.transcribe import Transcription

    finals = list(Transcription(engine, DATA / "en_real_jfk.wav"))
    long = [c for c in finals if len(split_cues(c.text, c.start, c.end)) > 1]
    assert long, [c.text for c in finals]
    cap: Any = long[0]
    words = cap.words
    assert "".join(w.word for w in words).split() == cap.text.split()
    assert cap.start <= words[0].start and words[-1].end <= cap.end + 1e-6
    buf = io.StringIO()
    SrtWriter(buf).write(cap)
    cues = _srt_cues(buf.getvalue())
    assert len(cues) > 1 and " ".join(c[2] for c in cues).split() == cap.text.split()
    assert cues[0][0] == pytest.approx(cap.start, abs=1e-3)
    assert cues[-1][1] == pytest.approx(cap.end, abs=1e-3)
    by_chars = split_cues(cap.text, cap.start, cap.end)
    done = 0
    prev_end = cap.start
    for (t0, t1, text), (_, c1, _) in zip(cues, by_chars, strict=True):
        n = len(text.split())
        if done + n < len(words):  # a cut: this cue ends at its last word or the next's start
            assert t1 in (
                pytest.approx(words[done + n - 1].end, abs=1e-3),
                pytest.approx(words[done + n].start, abs=1e-3),
            )
            assert abs(t1 - c1) > 1e-3  # and not where the characters would have put it
        if done:
            assert t0 == pytest.approx(max(words[done].start, prev_end), abs=1e-3)
        prev_end = t1
        done += n
    buf = io.StringIO()
    JsonlWriter(buf).write(cap)
    row = json.loads(buf.getvalue())
    assert [x["word"] for x in row["words"]] == [w.word for w in words]
    assert row["words"][0]["start"] == round(words[0].start, 3)
