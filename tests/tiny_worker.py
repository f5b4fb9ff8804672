"""A third worker backend, as small as one can be: the proof that `runtime.worker_api.Worker`
says what a worker is.

`TinyWorker` is a real worker, not a stand-in: it decodes on a real `Engine`, one job at a
time on its own thread, by the plain rules (no batching, no joined finals, no stepping), and
inherits everything else — the queue's rules, dropped jobs told on its thread, the books,
admission, `stop` — from the scheduler core (`runtime.scheduler`) the two shipped backends
share. A GPU batched verifier or any other backend starts from the same place.
"""

from __future__ import annotations

import threading
import time

from streamcap.core.capacity import CapacityConfig
from streamcap.core.constants import ENCODER_POSITIONS_PER_S
from streamcap.runtime.costs import CostModel, CostModelConfig
from streamcap.runtime.engine import Engine, with_words
from streamcap.runtime.jobs import DecodeJob, JobOutcome
from streamcap.runtime.scheduler import Scheduler
from streamcap.runtime.worker import final_cost


class TinyWorker(Scheduler):
    """Decodes each job alone on ``engine``, on the worker's own thread."""

    def __init__(
        self, engine: Engine, *, capacity: CapacityConfig | None = None, name: str = "tiny"
    ) -> None:
        super().__init__(
            name=name, capacity=capacity, costs=CostModel(CostModelConfig(max_batch=1))
        )
        self.engine = engine
        #: the thread each job ran on (the tests check the thread contract with it)
        self.ran_on: list[str] = []

    def warm_up(self, language: str | None = None) -> float:
        """Warm the engine up; a final's cost is admission's prior (as the local worker's)."""
        cost = final_cost(self.engine, language)
        self._set_prior(cost)
        return cost

    def _loop(self) -> None:
        while jobs := self._next():  # one at a time: the queue's next job
            self._finish(jobs, [self._decode(job) for job in jobs])

    def _decode(self, job: DecodeJob) -> JobOutcome:
        self.ran_on.append(threading.current_thread().name)
        outcome = JobOutcome(queued_s=time.perf_counter() - job.submitted)
        try:
            options, hypothesis = outcome.options, outcome.hypothesis = job.prepared(self.engine)
            t0 = time.perf_counter()
            encoded = self.engine.encode(job.audio, context_s=job.context_s)
            result = self.engine.decode(encoded, options, hypothesis=hypothesis)
            if job.word_timestamps:
                result = with_words(self.engine, encoded, options, result)
            outcome.result = result
            outcome.compute_s = time.perf_counter() - t0
            outcome.encoder_s = encoded.encoder_s
            outcome.decoder_s = result.stats.decoder_s
            outcome.context_s = encoded.enc.shape[1] / ENCODER_POSITIONS_PER_S
            self.costs.observe_job(job.kind, encoded.encoder_s, result.stats.decoder_s)
        except Exception as e:  # a bad job must not stop the worker
            outcome.error = e
        return outcome
