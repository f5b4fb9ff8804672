"""What a worker is: the one interface the server, its metrics and `LiveStream` see.

A worker decodes jobs (`runtime.jobs.DecodeJob`) from any number of streams. The backends are
`runtime.worker.InferenceWorker` (an engine on a thread of this process) and
`cluster.remote.RemoteWorker` (replicas behind a transport); both are built on one scheduler
core (`runtime.scheduler.Scheduler`: the queue's rules, the books, admission, the lifecycle)
and differ only in how a job runs. A third backend subclasses that core, or satisfies
`Worker` by itself; nothing above it changes.

`Worker` is three ports, one per audience, so each sees only what it uses: `StreamWorker`
(a live stream: submit, wait for its own jobs, a final's cost), `WorkerStatus` (the server's
status, admission control and metrics: the model, the books, load, admission, health and
typed figures, `runtime.worker_status`) and `WorkerLifecycle` (the worker's owner: warm up,
start or step, the number of live streams, stop). Tokenizing a job's prompt is the job
runner's (`runtime.jobs.DecodeJob.prepared`), measured costs are the worker's own
(`runtime.costs`): neither is on the port.

`ModelInfo` is what a worker's model says of itself without its weights: `runtime.engine.Engine`
and `models.card.ModelCard` (the Ray gateway's tokenizer) both satisfy it.

Pure typing: nothing here imports torch, a model or a thread.

Thread contract (every worker keeps it):
- Any thread may call `submit`, `wait_idle`, `final_cost_s`, every `WorkerStatus` method,
  `streams_changed` and `stop`; they hold the worker's lock only for bookkeeping and never
  run a decode.
- `submit` never runs a callback: the waiting jobs a submission makes stale are told
  (``on_done`` with ``dropped=True``) later, by the thread that runs jobs. So a feeder (the
  server's event loop) is never re-entered from inside its own `submit`.
- Every job's ``on_done`` runs exactly once, and ``prepare`` once when the job starts, on the
  worker's thread (or the thread that steps a worker without one: `run_one`, `run_pending`,
  `wait_idle`); they may call `submit`. A stream's finals are told in the order submitted.
- `start`, `run_one` and `run_pending` belong to one owner; a worker that runs on its own
  thread only (a remote one) raises on `run_one` and `run_pending`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from typing_extensions import Self

    from streamcap.core.capacity import Admission, Load
    from streamcap.decoding.spec import WhisperSpec
    from streamcap.runtime.jobs import DecodeJob, StreamStats, WorkerStats
    from streamcap.runtime.worker_status import BatchFigures, RemoteStatus

__all__ = [
    "ModelInfo",
    "ModelName",
    "Placed",
    "StreamWorker",
    "Worker",
    "WorkerLifecycle",
    "WorkerStatus",
]


class Placed(Protocol):
    """Where a model decodes, for ``streamcap_engine_info`` (`models.loader.Placement`, or
    the replicas' own report, `models.card.RemotePlacement`)."""

    @property
    def device(self) -> str: ...

    @property
    def precision(self) -> str: ...


class ModelName(Protocol):
    @property
    def name(self) -> str: ...


class ModelInfo(Protocol):
    """A worker's model without its weights: its tokenizer and languages, its name and where
    it runs. `Engine` and `ModelCard` satisfy it."""

    @property
    def spec(self) -> WhisperSpec: ...

    @property
    def multilingual(self) -> bool: ...

    @property
    def placement(self) -> Placed: ...

    @property
    def main(self) -> ModelName: ...

    def text_to_ids(self, text: str) -> tuple[int, ...]:
        """Token ids of plain text (prompts)."""
        ...


class StreamWorker(Protocol):
    """What a live stream uses of a worker (`runtime.stream.LiveStream`): it submits jobs,
    waits for its own to be done, and reads what a final costs (its early-final rule's input,
    `core.stream.StreamProtocol.receive_final_cost`). Nothing of the model: the job runner
    tokenizes (`runtime.jobs.DecodeJob.prepared`)."""

    def submit(self, job: DecodeJob) -> DecodeJob:
        """Queue ``job`` (numbered and stamped); never runs a callback."""
        ...

    def wait_idle(self, timeout: float | None = None, stream: str | None = None) -> bool:
        """Block until nothing of ``stream`` waits or runs (a worker without a thread runs its
        jobs here); False on timeout."""
        ...

    @property
    def threaded(self) -> bool:
        """True while the worker's own thread runs jobs (else its owner steps it)."""
        ...

    def final_cost_s(self) -> float | None:
        """Mean seconds one final costs on this worker, once measured (None before)."""
        ...


class WorkerStatus(Protocol):
    """What the server's status, admission control and metrics read of a worker
    (`server.app`, `server.metrics`): its model, its books, its load and admission, its
    health, and typed figures (`runtime.jobs`, `runtime.worker_status`), never a dict read
    back by key. Every method is bookkeeping: any thread, never a decode."""

    @property
    def engine(self) -> ModelInfo:
        """The model the decodes run on (tokenizer, languages, placement)."""
        ...

    @property
    def queue_depth(self) -> int:
        """Jobs waiting (not those running or in flight)."""
        ...

    def idle(self, stream: str | None = None) -> bool:
        """Nothing of ``stream`` (of any, if None) waiting, running, or still to be told."""
        ...

    def total_stats(self) -> WorkerStats:
        """Totals over all streams, with the queue depth now and at most."""
        ...

    def stream_stats(self, stream: str) -> StreamStats:
        """Totals for one stream, with its jobs waiting now."""
        ...

    def load(self) -> Load:
        """The measured load over the meter's window (`core.capacity`)."""
        ...

    def admission(self, streams: int, joins_room: bool = False) -> Admission:
        """May one more publisher join ``streams`` live ones (`core.capacity.admit`)?"""
        ...

    def batch_figures(self) -> BatchFigures:
        """The decoder batches run, by size, and their measured step costs."""
        ...

    # ---- health (a backend whose decoders live elsewhere says more than the defaults)

    def health(self) -> str:
        """One line for /healthz (``ok`` for a local worker)."""
        ...

    def usable(self) -> bool:
        """True while new work has somewhere to go (a local worker: always)."""
        ...

    def remote_status(self) -> RemoteStatus | None:
        """The remote decoders (`server.metrics.remote_families`); None for a worker without
        any."""
        ...


class WorkerLifecycle(Protocol):
    """What the worker's owner does with it (the command line, `runtime.replay`, a test):
    warm it up, run it on its thread or step it, tell it how many streams are live, stop
    it."""

    def start(self) -> Self:
        """Run jobs on the worker's own thread until `stop`."""
        ...

    def stop(self, timeout: float | None = None, drain: bool = True) -> None:
        """Stop; waiting partials are dropped (and told), with ``drain`` the finals are
        decoded first, without it they are dropped too."""
        ...

    def run_one(self) -> bool:
        """Run the next job in the calling thread (a worker without a thread)."""
        ...

    def run_pending(self) -> int:
        """Run jobs in the calling thread until none waits; how many ran."""
        ...

    def warm_up(self, language: str | None = None) -> float:
        """Get ready to decode and measure the prior of admission control: the cost of one
        final (seconds), which it returns."""
        ...

    def streams_changed(self, streams: int) -> None:
        """The number of live streams (talk channels) is now ``streams``."""
        ...


@runtime_checkable
class Worker(StreamWorker, WorkerStatus, WorkerLifecycle, Protocol):
    """A whole worker: decodes jobs from many streams by the queue's rules
    (`runtime.job_queue`), for its three audiences (a stream, the server's status, its owner);
    see the module docstring for the thread contract."""
