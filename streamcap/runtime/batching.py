"""Several waiting decode jobs of different streams run as one batch (the worker's thread).

What may be batched, and why (issue 10):
- decoder steps, always when the cost model says it pays: every row's forward runs in one
  pass (`decoding.batched.BatchedDecoder`), each row with its own KV cache, draft and stop
  rules; a token whose batched lead is within a safe multiple of the measured batched-vs-single
  logit difference is decided again at batch 1, so every row's tokens are its batch-1 greedy;
- encoder calls of partials only (previews), when measured to save: a final's window always
  goes through the encoder alone, since a batched encoder output differs in the last bits and
  its tokens must be exactly `generate`'s on that window.

Word times (`DecodeJob.word_timestamps`, finals) are one alignment pass per job after the
batch, its time added to that job's compute time.

The worker picks the jobs (finals first, never mixed with partials, so a final never waits for
a partial's encoder) and the batch size (`costs.CostModel`); this module runs them and reports
one `JobOutcome` per job, with the batch's time shared out, and feeds the measured costs back.

Batching is the transformers engine's own (`runtime.engine.Engine`: its hand-run decoder
layers, front end and drafters), not the engine port's: `can_batch` says whether an engine has
it, and an engine without it (any other `runtime.engine_api.InferenceEngine`) decodes one job
at a time through the port.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TypeGuard

import numpy as np

from streamcap.core.constants import ENCODER_POSITIONS, ENCODER_POSITIONS_PER_S
from streamcap.core.decode_types import DecodingOptions
from streamcap.decoding.batched import BatchedDecoder
from streamcap.decoding.batched_encode import context_positions, encode_windows
from streamcap.runtime.coalesce import complete_parts
from streamcap.runtime.costs import CostModel
from streamcap.runtime.engine import Encoded, Engine, with_words
from streamcap.runtime.engine_api import InferenceEngine
from streamcap.runtime.jobs import DecodeJob, JobOutcome


def can_batch(engine: InferenceEngine) -> TypeGuard[Engine]:
    """Batched decoding needs the transformers engine (`Engine`) with its hand-run decoder
    layers and no assistant model (its drafts come from one stateful model per window)."""
    return (
        isinstance(engine, Engine)
        and engine.assistant is None
        and engine.decoder.step.lean is not None
    )


class BatchRunner:
    """Runs a batch of prepared jobs on ``engine``; owned by the worker's thread."""

    def __init__(self, engine: Engine, costs: CostModel) -> None:
        self.engine = engine
        self.costs = costs
        self.decoder = BatchedDecoder(engine.decoder)

    def encode(self, jobs: Sequence[DecodeJob]) -> tuple[list[Encoded], list[float]]:
        """Encoder outputs of the jobs' windows and each one's share of the encoder time."""
        out: list[Encoded | None] = [None] * len(jobs)
        seconds = [0.0] * len(jobs)
        groups: dict[int | None, list[int]] = {}
        for i, job in enumerate(jobs):
            if job.kind == "final":  # exact: alone, on the standard 30 s input
                out[i], seconds[i] = self._single(job.audio, None)
                continue
            groups.setdefault(context_positions(len(job.audio), job.context_s), []).append(i)
        for positions, members in groups.items():
            key = positions if positions is not None else ENCODER_POSITIONS
            if not self.costs.encode_together(key, len(members)):
                for i in members:
                    out[i], seconds[i] = self._single(jobs[i].audio, jobs[i].context_s)
                continue
            t0 = time.perf_counter()
            windows = [(jobs[i].audio, jobs[i].context_s) for i in members]
            encoded = encode_windows(self.engine.frontend, windows)
            self.costs.observe_encode(key, len(members), time.perf_counter() - t0)
            for i, w in zip(members, encoded, strict=True):
                out[i] = Encoded(w.enc, w.features, w.duration_s, w.encoder_s)
                seconds[i] = w.encoder_s
        return [e for e in out if e is not None], seconds

    def _single(self, audio: np.ndarray, context_s: float | None) -> tuple[Encoded, float]:
        encoded = self.engine.encode(audio, context_s=context_s)
        self.costs.observe_encode(encoded.positions, 1, encoded.encoder_s)
        return encoded, encoded.encoder_s

    def run(
        self,
        jobs: Sequence[DecodeJob],
        prepared: Sequence[tuple[DecodingOptions, tuple[int, ...] | None]],
        outcomes: Sequence[JobOutcome],
    ) -> None:
        """Encode and decode ``jobs`` (their options and hypotheses ``prepared``), filling in
        ``outcomes``; an exception fails the whole batch (the worker reports it per job)."""
        encoded, enc_seconds = self.encode(jobs)
        engine = self.engine
        drafters = [
            engine.make_drafter("hypothesis" if hyp else "none", hyp, enc)
            for (_, hyp), enc in zip(prepared, encoded, strict=True)
        ]
        t0 = time.perf_counter()
        rows = self.decoder.decode_batch_counted(
            [e.enc for e in encoded],
            [opts for opts, _ in prepared],
            drafters,
            [e.duration_s for e in encoded],
        )
        decode_s = time.perf_counter() - t0
        passes = [r.result.stats.forward_passes for r in rows]
        lockstep = max(passes, default=0)
        if lockstep:
            mean_rows = sum(passes) / lockstep  # rows leave as they finish
            self.costs.observe_step(max(1, round(mean_rows)), decode_s / lockstep)
        self.costs.observe_batch(len(jobs))
        self.costs.observe_lockstep(jobs[0].kind, len(jobs), decode_s)
        for i, (row, enc) in enumerate(zip(rows, encoded, strict=True)):
            out = outcomes[i]
            out.options, out.hypothesis = prepared[i]
            # the encoder ran before (its time joins the stats, as in `Engine.decode`)
            stats = replace(row.result.stats, encoder_s=enc_seconds[i])
            out.result = replace(row.result, stats=stats)
            out.encoder_s = enc_seconds[i]
            out.decoder_s = stats.decoder_s
            # the batch's decoder time, shared by forward passes
            out.compute_s = enc_seconds[i] + decode_s * passes[i] / max(1, sum(passes))
            out.context_s = enc.positions / ENCODER_POSITIONS_PER_S
            t1 = time.perf_counter()
            if jobs[i].word_timestamps:  # one pass per job, after the batch: its own time
                out.result = with_words(engine, enc, prepared[i][0], out.result)
            if jobs[i].parts is not None:  # a backlog of finals: cut and complete
                out.parts = complete_parts(engine, jobs[i], out.result)
            out.compute_s += time.perf_counter() - t1
            out.batch = len(jobs)
            out.rechecked = row.counters.rechecked
