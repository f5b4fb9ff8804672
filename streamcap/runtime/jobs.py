"""What the inference worker is given and what it reports: jobs, outcomes, typed stats.

Frozen snapshots (`StreamStats`, `WorkerStats`) are what metrics, reports and tests read,
field by field; `after_job` is the one rule that counts a finished job in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, TypeVar

import numpy as np

from streamcap.core.constants import SAMPLE_RATE, WINDOW_S
from streamcap.core.decode_types import DecodeResult, DecodeStats, DecodingOptions, JobInputs
from streamcap.core.prompting import join_prompt_ids
from streamcap.decoding.spec import MAX_PROMPT_TOKENS
from streamcap.runtime.clock import Clock

__all__ = ["DecodeJob", "JobOutcome", "StreamStats", "WorkerStats"]

JobKind = Literal["partial", "final"]


@dataclass
class JobOutcome:
    """What became of a job: a result, a drop (stale partial), or an error."""

    result: DecodeResult | None = None
    dropped: bool = False
    error: BaseException | None = None
    encoder_s: float = 0.0
    decoder_s: float = 0.0
    compute_s: float = 0.0  # wall time of encode + decode, as charged to the clock
    queued_s: float = 0.0
    context_s: float = WINDOW_S
    options: DecodingOptions | None = None  # as decoded (after prepare)
    hypothesis: tuple[int, ...] | None = None
    batch: int = 1  # rows decoded together with this job (itself included)
    rechecked: int = 0  # batched choices decided again at batch 1 (`runtime.batching`)
    coalesced: int = 1  # finals decoded as one window with this one (`runtime.coalesce`)
    #: the coalesced job whose window this final's result was cut from (`runtime.coalesce`)
    joined: DecodeJob | None = None
    #: a coalesced job's result per final, cut and completed by the worker (`runtime.coalesce`)
    parts: tuple[DecodeResult, ...] | None = None
    #: how many of a coalesced job's first finals the worker told already, before it decoded
    #: a later one again alone (`runtime.coalesce.complete_parts`); the rest are told at the end
    told: int = 0


class Tokenizes(Protocol):
    """What preparing a job needs of the model that runs it (`worker_api.ModelInfo` has it)."""

    @property
    def multilingual(self) -> bool: ...

    def text_to_ids(self, text: str) -> tuple[int, ...]: ...


@dataclass(eq=False)
class DecodeJob:
    """One decode of one window of one stream.

    ``prepare`` (called on the worker thread when the job starts) returns what the decode
    needs that is known only then (`JobInputs`: options, prompt text, the hypothesis to draft
    from), so it reflects results delivered just before; the runner makes token ids of it
    (`prepared`). ``on_done`` is called on the worker thread (or the stepping thread) with the
    outcome, also for drops. ``word_timestamps`` fills the result's ``words`` after the decode,
    its time counted in the job's compute time. ``request`` is the submitter's number for it
    (a stream's `core.stream.DecodeOrder`); a ``coalescable`` final may share a window with its
    stream's next final while it waits (`runtime.coalesce`); ``parts`` are the finals a
    coalesced job decodes.
    """

    stream: str
    kind: JobKind
    window: int
    audio: np.ndarray
    on_done: Callable[[DecodeJob, JobOutcome], None]
    options: DecodingOptions = field(default_factory=DecodingOptions)
    hypothesis: Sequence[int] | None = None
    prepare: Callable[[], JobInputs] | None = None
    context_s: float | None = None  # encoder context for a partial; None: standard 30 s
    word_timestamps: bool = False  # time the result's words (`Engine.align`; finals)
    clock: Clock | None = None
    request: int = 0
    coalescable: bool = False
    parts: tuple[Part, ...] | None = None
    id: int = 0
    submitted: float = 0.0

    def prepared(self, model: Tokenizes) -> tuple[DecodingOptions, tuple[int, ...] | None]:
        """The options and the draft to decode with now: ``prepare``'s, if the job has one
        (every backend calls this once, when the job starts), its prompt text made token ids
        by ``model`` (the stream's own prompt first, then as much of the context as fits),
        and no language for a model that has only one."""
        options, hypothesis = self.options, self.hypothesis
        if self.prepare is not None:
            inputs = self.prepare()
            options, hypothesis = inputs.options, inputs.hypothesis
            if not model.multilingual:
                options = replace(options, language=None)
            fixed = model.text_to_ids(inputs.prompt.fixed) if inputs.prompt.fixed else ()
            context = model.text_to_ids(inputs.prompt.context) if inputs.prompt.context else ()
            if fixed or context:
                ids = join_prompt_ids(fixed, context, MAX_PROMPT_TOKENS)
                options = replace(options, prompt_ids=ids)
        return options, tuple(hypothesis) if hypothesis else None


@dataclass(frozen=True)
class Part:
    """One final inside a coalesced job (`runtime.coalesce`): its own job, and where its audio
    sits in the joined window (seconds)."""

    job: DecodeJob
    offset: float
    duration: float


def parts_of(job: DecodeJob) -> tuple[Part, ...]:
    """The finals ``job`` decodes: its parts if it is coalesced, else itself."""
    if job.parts is not None:
        return job.parts
    return (Part(job, 0.0, len(job.audio) / SAMPLE_RATE),)


@dataclass(frozen=True)
class StreamStats:
    """What the worker did for one stream (or for all), as of one moment."""

    jobs: int = 0  # decodes run (not counting errors)
    finals: int = 0
    partials: int = 0
    dropped_partials: int = 0  # stale partials dropped unrun
    finals_joined: int = 0  # finals decoded in an earlier final's window (`runtime.coalesce`)
    errors: int = 0
    compute_s: float = 0.0  # encode + decode, as charged to the jobs' clocks
    queue_wait_s: float = 0.0
    final_queue_wait_s: float = 0.0  # the finals' share of queue_wait_s
    audio_s: float = 0.0  # audio decoded, seconds
    decode: DecodeStats = field(default_factory=DecodeStats)  # summed over the decodes
    queue_depth: int = 0  # jobs waiting now

    def as_dict(self) -> dict[str, float]:
        """Flat numbers for reports (JSON): seconds rounded, the decode counters inlined."""
        d: dict[str, float] = {
            "jobs": self.jobs,
            "finals": self.finals,
            "partials": self.partials,
            "dropped_partials": self.dropped_partials,
            "finals_joined": self.finals_joined,
            "errors": self.errors,
            "compute_s": round(self.compute_s, 4),
            "queue_wait_s": round(self.queue_wait_s, 4),
            "final_queue_wait_s": round(self.final_queue_wait_s, 4),
            "audio_decoded_s": round(self.audio_s, 3),
        }
        d.update(self.decode.as_dict())
        d["queue_depth"] = self.queue_depth
        return d


@dataclass(frozen=True)
class WorkerStats(StreamStats):
    """Totals over every stream, plus the deepest queue so far and the streams ever seen."""

    max_queue_depth: int = 0
    streams: int = 0

    def as_dict(self) -> dict[str, float]:
        d = super().as_dict()
        d["max_queue_depth"] = self.max_queue_depth
        d["streams"] = self.streams
        return d


_S = TypeVar("_S", bound=StreamStats)


def after_job(stats: _S, job: DecodeJob, outcome: JobOutcome) -> _S:
    """``stats`` with one more job run (or failed) counted in."""
    queue_wait_s = stats.queue_wait_s + outcome.queued_s
    final = job.kind == "final"
    final_wait = stats.final_queue_wait_s + (outcome.queued_s if final else 0.0)
    if outcome.error is not None:
        return replace(
            stats,
            queue_wait_s=queue_wait_s,
            final_queue_wait_s=final_wait,
            errors=stats.errors + 1,
        )
    result = outcome.result
    return replace(
        stats,
        queue_wait_s=queue_wait_s,
        final_queue_wait_s=final_wait,
        jobs=stats.jobs + 1,
        compute_s=stats.compute_s + outcome.compute_s,
        audio_s=stats.audio_s + len(job.audio) / SAMPLE_RATE,
        finals=stats.finals + final,
        finals_joined=stats.finals_joined + len(parts_of(job)) - 1,
        partials=stats.partials + (not final),
        decode=stats.decode + result.stats if result is not None else stats.decode,
    )
