"""One worker interface (`runtime.worker_api.Worker`): the shipped backends satisfy it, and a
third backend (`tiny_worker.TinyWorker`, ~60 lines on the shared scheduler core) serves a real
caption server: the bundled Whisper base model, real speech, real sockets on 127.0.0.1, a real
publisher and viewer. Nothing here is a mock."""

from __future__ import annotations

import math
import re
import threading
from typing import Any

import numpy as np
import pytest
from serverkit import PUB, VIEW, Collector, FakeWorker, http_get, padded, recall, run_publish
from tiny_worker import TinyWorker

from streamcap.core.capacity import CapacityConfig
from streamcap.core.decode_types import DecodingOptions, JobInputs
from streamcap.runtime.jobs import DecodeJob, JobOutcome
from streamcap.runtime.worker_api import Worker
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

pytestmark = pytest.mark.model

LENIENT = CapacityConfig(max_finals_load=math.inf, max_final_wait_s=math.inf)


def test_every_backend_is_a_worker(engine: Any) -> None:
    from streamcap.cluster.remote import RemoteWorker
    from streamcap.cluster.transport import LocalTransport
    from streamcap.runtime.worker import InferenceWorker

    local = InferenceWorker(engine)
    remote = RemoteWorker(engine, LocalTransport(InferenceWorker(engine)))
    for worker in (local, remote, TinyWorker(engine), FakeWorker()):
        assert isinstance(worker, Worker), type(worker)
    # what a backend without remote decoders says (the shared core's defaults)
    assert (local.health(), local.usable(), local.remote_status()) == ("ok", True, None)
    assert remote.health().startswith("degraded") and remote.remote_status() is not None
    with pytest.raises(RuntimeError, match="cannot be stepped"):
        TinyWorker(engine).run_one()


def test_a_third_backend_keeps_the_queue_rules_and_the_thread_contract(
    engine: Any, speech: dict[str, np.ndarray]
) -> None:
    """The core's rules on a backend that only says how a job runs: a final held on the
    worker's thread; meanwhile a newer partial drops the older and the stream's final drops
    the newer; `submit` never calls back; the running final, then the drops, then the next
    final are told on the worker's thread, each final exactly plain greedy on its audio."""
    en = DecodingOptions(language="en")
    first, second = speech["en_real_goforward"], speech["en_real_librivox_0880"]
    started, gate = threading.Event(), threading.Event()
    told: list[tuple[str, int, JobOutcome, str]] = []

    def on_done(job: DecodeJob, outcome: JobOutcome) -> None:
        told.append((job.kind, job.window, outcome, threading.current_thread().name))

    def held() -> JobInputs:  # runs when the first final starts
        started.set()
        assert gate.wait(30)
        return JobInputs(en)

    worker = TinyWorker(engine, capacity=LENIENT).start()
    try:
        worker.submit(DecodeJob("s", "final", 1, first, on_done, prepare=held))
        assert started.wait(30)
        worker.submit(DecodeJob("s", "partial", 2, second[:16000], on_done, options=en))
        worker.submit(DecodeJob("s", "partial", 3, second[:24000], on_done, options=en))
        worker.submit(DecodeJob("s", "final", 3, second, on_done, options=en))
        assert told == [] and worker.queue_depth == 1 and not worker.idle("s")
        gate.set()
        assert worker.wait_idle(120)
    finally:
        worker.stop()
    assert [(kind, window, o.dropped) for kind, window, o, _ in told] == [
        ("final", 1, False), ("partial", 2, True), ("partial", 3, True), ("final", 3, False),
    ]  # fmt: skip
    assert {thread for *_, thread in told} == {"tiny"}
    for (_, _, outcome, _), audio in zip(told[::3], (first, second), strict=True):
        assert outcome.error is None and outcome.result is not None
        assert outcome.result.tokens == engine.transcribe(audio, en).tokens
    stats = worker.total_stats()
    assert (stats.finals, stats.partials, stats.dropped_partials) == (2, 0, 2)
    assert worker.stream_stats("s").finals == 2 and worker.idle()


def test_a_third_backend_serves_a_real_caption_server(
    engine: Any, speech: dict[str, np.ndarray]
) -> None:
    worker = TinyWorker(engine, capacity=LENIENT)
    assert worker.warm_up() > 0
    worker.start()
    try:
        config = ServerConfig(port=0, publish_token=PUB, view_token=VIEW)
        with ServerThread(config, worker) as srv:
            assert http_get(srv.url("/healthz"))[::2] == (200, "ok\n")
            assert http_get(srv.url("/readyz"))[::2] == (200, "ready\n")
            viewer = Collector(srv, "tiny")
            run_publish(srv, "tiny", padded(speech["en_real_goforward"]))
            ref = "go forward ten meters"
            ok = viewer.wait_for(lambda v: v.finals() and recall(v.text(), ref) >= 0.75, 60)
            viewer.stop()
            assert ok, viewer.events
            status, _, body = http_get(srv.url("/metrics"))
        assert status == 200
        assert re.search(r'streamcap_engine_info\{device="cpu",model="base"', body), body
        jobs = re.search(r"^streamcap_decode_jobs_total (\S+)$", body, re.M)
        assert jobs is not None and float(jobs.group(1)) >= 2
        assert re.search(r"^streamcap_accepting_streams 1\.0$", body, re.M)
        assert worker.wait_idle(60)
    finally:
        worker.stop()
    stats = worker.total_stats()
    assert stats.finals >= 1 and stats.errors == 0 and set(worker.ran_on) == {"tiny"}
    assert worker.costs.job_cost("final") is not None  # measured as it ran
