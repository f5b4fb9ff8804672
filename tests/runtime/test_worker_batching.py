"""The worker batches waiting jobs of different streams (issue 10), and every final is still its
window's plain greedy `generate`, token for token: the bundled Whisper base on real speech.

The cost model is given measured-looking costs up front so that the test decides the batch
shape (the worker's own measurements then take over); nothing else is staged.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from streamcap.core.decode_types import DecodingOptions
from streamcap.decoding.reference import reference_decode
from streamcap.runtime.jobs import DecodeJob, JobOutcome
from streamcap.runtime.worker import InferenceWorker

pytestmark = pytest.mark.model

CLIPS = ["en_real_jfk", "en_real_librivox_0870", "en_real_forever", "en_real_praatio_mary"]
EN = DecodingOptions(language="en")


def _memory_bound(worker: InferenceWorker, encoder_pays: bool = False) -> None:
    """Costs as a GPU-like machine measures: decoder steps memory-bound (rows nearly free up to
    8), jobs mostly decoder time."""
    for b, s in {1: 0.020, 2: 0.021, 4: 0.024, 8: 0.030}.items():
        worker.costs.observe_step(b, s)
    for kind in ("final", "partial"):
        worker.costs.observe_job(kind, 0.01, 0.5)
    # a GPU's batches are short; this CPU's real jobs (measured as the test runs) are not
    worker.costs.config = replace(worker.costs.config, max_batch_wall_s=60.0)
    if not encoder_pays:
        for positions in range(1, 1501):  # an encoder call costs per window, batched or not
            worker.costs.observe_encode(positions, 1, 0.3)
            worker.costs.observe_encode(positions, 2, 0.6)


class Done:
    def __init__(self) -> None:
        self.outcomes: dict[str, JobOutcome] = {}
        self.order: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, job: DecodeJob, outcome: JobOutcome) -> None:
        with self.lock:
            self.outcomes[job.stream] = outcome
            self.order.append(job.stream)


def _job(stream: str, kind: str, audio: np.ndarray, done: Done, **kw: Any) -> DecodeJob:
    return DecodeJob(stream=stream, kind=kind, window=1, audio=audio, on_done=done, **kw)  # type: ignore[arg-type]


def test_finals_of_four_streams_decode_as_one_batch_and_equal_generate(
    engine: Any, speech: dict[str, np.ndarray]
) -> None:
    worker = InferenceWorker(engine, max_batch=8)
    _memory_bound(worker)
    done = Done()
    # rows of different lengths and drafts: none, the exact answer, a wrong one, a stale one
    refs = {}
    for clip in CLIPS:
        enc = engine.encode(speech[clip])
        refs[clip], _ = reference_decode(engine.decoder, enc.enc, EN, enc.duration_s)
    hyps: dict[str, tuple[int, ...] | None] = {
        CLIPS[0]: None,
        CLIPS[1]: tuple(refs[CLIPS[1]]),
        CLIPS[2]: tuple(refs[CLIPS[0]]),  # another clip's words
        CLIPS[3]: tuple(refs[CLIPS[3]][:2]),  # a partial's start
    }
    for clip in CLIPS:
        worker.submit(_job(clip, "final", speech[clip], done, options=EN, hypothesis=hyps[clip]))
    partial_audio = {f"p-{c}": speech[c][: len(speech[c]) // 2] for c in CLIPS[:3]}
    for name, audio in partial_audio.items():
        worker.submit(_job(name, "partial", audio, done, options=EN, context_s=6.0))
    worker.start()
    assert worker.wait_idle(300)
    worker.stop()
    assert done.order[:4] == CLIPS  # finals first, in submission order
    for clip in CLIPS:
        out = done.outcomes[clip]
        assert out.error is None, out.error
        assert out.batch == 4
        assert out.result is not None and list(out.result.tokens) == refs[clip], clip
    for name, audio in partial_audio.items():  # partials: a batch of their own, exact too
        out = done.outcomes[name]
        assert out.error is None and out.batch == 3 and out.result is not None
        enc = engine.encode(audio, context_s=6.0)
        ref, _ = reference_decode(engine.decoder, enc.enc, EN, enc.duration_s)
        assert list(out.result.tokens) == ref, name
    stats = worker.total_stats()
    assert stats.finals == 4 and stats.partials == 3 and stats.errors == 0
    figures = worker.batch_figures()
    assert figures.mean_size is not None and figures.mean_size > 1 and figures.batches[4] >= 1


def test_batched_partial_encoder_calls_when_they_pay(
    engine: Any, speech: dict[str, np.ndarray]
) -> None:
    """Partials of equal encoder context share one encoder call when the model says it pays
    (previews: their tokens follow their own batched encoder output)."""
    worker = InferenceWorker(engine, max_batch=4)
    _memory_bound(worker, encoder_pays=True)
    worker.costs.observe_encode(300, 1, 0.3)  # 6 s context: one measured call, none batched
    done = Done()
    for clip in CLIPS[:2]:
        worker.submit(_job(clip, "partial", speech[clip][:32000], done, options=EN, context_s=6.0))
    worker.run_pending()  # stepped worker: one job at a time
    assert all(o.batch == 1 for o in done.outcomes.values())
    done2 = Done()
    for clip in CLIPS[:2]:
        worker.submit(_job(clip, "partial", speech[clip][:32000], done2, options=EN, context_s=6.0))
    worker.start()
    assert worker.wait_idle(120)
    worker.stop()
    for clip in CLIPS[:2]:
        out = done2.outcomes[clip]
        assert out.error is None and out.batch == 2 and out.result is not None
        assert out.result.text.strip()
        # the same words as at batch 1 on these clips
        assert out.result.text == done.outcomes[clip].result.text  # type: ignore[union-attr]
