"""A backlog of finals decoded as one window (`runtime.coalesce`, `runtime.job_queue`).

The pure parts (when two jobs join, how a result is cut) run without a model: tokens here are
character codes and ``decode`` spells them. The exactness test runs the bundled model on real
speech: the joined window's tokens are plain greedy ``generate``'s, and the cut gives each
final its own words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from streamcap.core.constants import SAMPLE_RATE as SR
from streamcap.core.decode_types import DecodeResult, DecodeStats, WordTiming
from streamcap.runtime.coalesce import GAP_S, MAX_COALESCED_S, coalesce_finals, split_result
from streamcap.runtime.job_queue import JobQueue
from streamcap.runtime.jobs import DecodeJob, JobOutcome, parts_of

DATA = Path(__file__).resolve().parents[1] / "data"


def spell(ids: Sequence[int]) -> str:
    return "".join(chr(i) for i in ids)


def result_of(words: list[tuple[str, float, float]]) -> DecodeResult:
    text = "".join(w for w, _, _ in words)
    return DecodeResult(
        tokens=tuple(ord(c) for c in text),
        text=text,
        language="en",
        no_speech_prob=0.01,
        avg_logprob=-0.2,
        stopped_by="eot",
        stats=DecodeStats(forward_passes=3),
        words=tuple(WordTiming(w, s, e, 0.9) for w, s, e in words),
    )


class Told:
    def __init__(self, probe: Callable[[], object] | None = None) -> None:
        self.outcomes: dict[int, JobOutcome] = {}
        self.order: list[int] = []
        self.seen: dict[int, object] = {}  # what `probe` said when each window was told
        self._probe = probe

    def __call__(self, job: DecodeJob, outcome: JobOutcome) -> None:
        self.outcomes[job.window] = outcome
        self.order.append(job.window)
        if self._probe is not None:
            self.seen[job.window] = self._probe()


#: the queue's coalescer, with a stand-in tokenizer (the local worker gives its engine's)
JOIN = partial(coalesce_finals, decode=spell)


def final(told: Told, window: int, seconds: float, stream: str = "a") -> DecodeJob:
    return DecodeJob(
        stream=stream,
        kind="final",
        window=window,
        audio=np.full(round(seconds * SR), 0.1 * window, dtype=np.float32),
        on_done=told,
        word_timestamps=True,
        coalescable=True,
    )


def test_a_result_is_cut_at_the_gaps_between_the_finals() -> None:
    # two finals: 2 s at 0, 3 s at 2 + GAP_S; a word straddling nothing, one near each edge
    second = 2.0 + GAP_S
    result = result_of(
        [(" Hello", 0.1, 0.5), (" there.", 0.6, 1.9), (" And", second + 0.05, second + 0.4),
         (" more", second + 0.5, second + 2.9)]
    )  # fmt: skip
    a, b = split_result(result, [(0.0, 2.0), (second, 3.0)], GAP_S, spell)
    assert (a.text, b.text) == (" Hello there.", " And more")
    assert a.tokens + b.tokens == result.tokens  # nothing lost, nothing reordered
    assert [w.word for w in b.words] == [" And", " more"]
    assert b.words[0].start == pytest.approx(0.05) and b.words[-1].end == pytest.approx(2.9)
    assert a.stats.forward_passes == 3 and b.stats.forward_passes == 0  # costs counted once
    assert b.avg_logprob == result.avg_logprob and b.language == "en"


def test_a_word_in_the_gap_goes_where_its_middle_is() -> None:
    result = result_of([(" one", 0.2, 0.9), (" two", 1.05, 1.3), (" three", 1.7, 2.0)])
    a, b = split_result(result, [(0.0, 1.0), (1.6, 1.0)], 0.6, spell)
    assert a.text == " one two" and b.text == " three"  # " two" ends its middle at 1.175 < 1.3
    assert a.words[-1].end == pytest.approx(1.0)  # clamped into the final's own audio


def test_a_final_with_no_words_heard_is_empty_and_one_without_times_keeps_everything() -> None:
    result = result_of([(" only", 0.1, 0.8), (" this.", 0.9, 1.2)])
    a, b, c = split_result(result, [(0.0, 1.5), (2.1, 1.0), (3.7, 1.0)], 0.6, spell)
    assert a.text == " only this." and b.text == c.text == "" and not b.tokens
    untimed = DecodeResult(result.tokens, result.text, "en", 0.0, -0.1, "eot")
    first, second = split_result(untimed, [(0.0, 1.5), (2.1, 1.0)], 0.6, spell)
    assert first.text == result.text and second.text == ""  # no word is lost


def test_a_final_joins_its_streams_waiting_final_in_its_place() -> None:
    told = Told()
    q = JobQueue(coalesce=JOIN)
    first = final(told, 1, 2.0)
    first.id, first.submitted = 1, 10.0
    other = final(told, 1, 2.0, stream="b")
    q.add(first)
    q.add(other)
    q.add(final(told, 2, 3.0))
    q.add(final(told, 3, 1.0))
    assert len(q.finals) == 2 and q.finals[1] is other  # a's three finals: one job, first place
    joined = q.finals[0]
    assert joined.id == 1 and joined.submitted == 10.0  # its place and its queue time
    parts = parts_of(joined)
    assert [p.job.window for p in parts] == [1, 2, 3]
    assert [p.offset for p in parts] == pytest.approx([0.0, 2.0 + GAP_S, 5.0 + 2 * GAP_S])
    assert len(joined.audio) == round((6.0 + 2 * GAP_S) * SR)
    at = round((2.0 + GAP_S) * SR)
    assert np.all(joined.audio[round(2.0 * SR) : at] == 0)  # silence between
    assert np.all(joined.audio[at : at + 3 * SR] == np.float32(0.2))  # the second's audio


def test_a_running_final_a_long_backlog_and_other_kinds_are_never_joined() -> None:
    told = Told()
    q = JobQueue(coalesce=JOIN)
    q.add(final(told, 1, 2.0))
    (running,) = q.take()  # started: nothing joins it
    q.add(final(told, 2, 2.0))
    assert len(q.finals) == 1 and q.finals[0].window == 2 and running.window == 1
    q.add(final(told, 3, MAX_COALESCED_S - 2.0))  # would pass the window's limit
    assert len(q.finals) == 2
    remote = JobQueue()  # an owner that does not complete joined finals
    remote.add(final(told, 1, 1.0))
    remote.add(final(told, 2, 1.0))
    assert len(remote.finals) == 2
    plain = final(told, 4, 1.0)
    plain.coalescable = False  # a submitter that did not ask (`LiveConfig.coalesce_finals`)
    q.add(plain)
    q.add(final(told, 5, 1.0))
    assert [j.window for j in q.finals] == [2, 3, 4, 5]


def test_each_final_hears_its_own_outcome_also_of_an_error() -> None:
    told = Told()
    q = JobQueue(coalesce=JOIN)
    q.add(final(told, 1, 1.0))
    q.add(final(told, 2, 1.0))
    (joined,) = q.take()
    joined.on_done(joined, JobOutcome(error=RuntimeError("boom"), compute_s=1.0))
    assert set(told.outcomes) == {1, 2}
    outcomes = told.outcomes.values()
    assert all(isinstance(o.error, RuntimeError) and o.coalesced == 2 for o in outcomes)
    assert told.outcomes[1].compute_s == 1.0 and told.outcomes[2].compute_s == 0.0


def _backlog(engine, first, second, told=None):  # type: ignore[no-untyped-def]
    """Two finals queued behind a stepped worker, run; (worker stats, the two results)."""
    from streamcap.runtime.engine import options_for
    from streamcap.runtime.worker import InferenceWorker

    opts = options_for(engine, "en", "transcribe")
    told = told or Told()
    w = InferenceWorker(engine)  # stepped: both wait until run_pending
    for window, audio in ((1, first), (2, second)):
        j = final(told, window, 1.0)
        j.audio, j.options = audio, opts
        w.submit(j)
    assert w.queue_depth == 1  # joined
    w.run_pending()
    results = [told.outcomes[k].result for k in (1, 2)]
    assert all(r is not None for r in results)
    return w.total_stats(), results, opts


def _greedy(engine, audio, opts):  # type: ignore[no-untyped-def]
    from streamcap.decoding.reference import reference_decode

    enc = engine.encode(audio)
    return tuple(reference_decode(engine.decoder, enc.enc, opts, enc.duration_s)[0])


@pytest.mark.model
def test_a_backlog_decodes_as_one_exact_window_split_per_final(engine) -> None:  # type: ignore[no-untyped-def]
    """Two real utterances queued behind a busy worker: one window, whose tokens are plain
    greedy ``generate``'s on it, cut so that each final gets its own utterance's words."""
    import soundfile as sf

    mary, _ = sf.read(DATA / "en_real_praatio_mary.wav", dtype="float32")
    jfk, _ = sf.read(DATA / "en_real_jfk.wav", dtype="float32")
    stats, (a, b), opts = _backlog(engine, mary, jfk)
    assert stats.jobs == 1 and stats.finals_joined == 1
    window = np.concatenate([mary, np.zeros(round(GAP_S * SR), np.float32), jfk])
    assert a.tokens + b.tokens == _greedy(engine, window, opts)  # exact, no token lost
    assert "mary" in a.text.lower() and "country" not in a.text.lower()
    assert "country" in b.text.lower() and "mary" not in b.text.lower()
    assert all(0 <= x.start <= x.end <= len(jfk) / SR for x in b.words)
    assert b.words[0].start < 1.0  # times from the second final's own first sample


@pytest.mark.model
def test_a_final_the_window_cut_short_is_decoded_again_alone(engine) -> None:  # type: ignore[no-untyped-def]
    """Whisper ends this window after JFK's sentence and never says "Mary rolled the barrel":
    the worker sees the second final got no words and decodes it alone, exactly."""
    import soundfile as sf

    jfk, _ = sf.read(DATA / "en_real_jfk.wav", dtype="float32")
    mary, _ = sf.read(DATA / "en_real_praatio_mary.wav", dtype="float32")
    encodes = []  # the engine's encoder calls, counted (instrumentation: the real encoder runs)
    real_encode = engine.encode

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        encodes.append(1)
        return real_encode(*args, **kwargs)

    told = Told(probe=lambda: len(encodes))
    engine.encode = counted
    try:
        stats, (a, b), opts = _backlog(engine, jfk, mary, told)
    finally:
        del engine.encode  # the class's method again
    # JFK's final, complete in the joined decode, is told before Mary's is encoded again
    assert told.order == [1, 2] and told.seen == {1: 1, 2: 2}
    window = np.concatenate([jfk, np.zeros(round(GAP_S * SR), np.float32), mary])
    whole = _greedy(engine, window, opts)
    assert a.tokens == whole  # the window's decode said JFK's words only
    assert "mary" not in engine.spec.tokenizer.decode(whole).lower()
    assert b.tokens == _greedy(engine, mary, opts)  # decoded again: plain greedy of its audio
    assert "mary rolled the barrel" in b.text.lower()
    assert stats.finals_joined == 1
