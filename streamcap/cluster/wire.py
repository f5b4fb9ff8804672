"""What travels between the gateway and an inference replica: frozen, picklable records.

A request carries everything a decode needs (the window's audio, the options with the prompt
already joined, the hypothesis to draft from, the encoder context), so any replica can serve
any request and no replica holds stream state that a failure could lose. A retry resends the
identical request, so it decodes exactly what the lost attempt would have.

Both sides must run the same streamcap (`PROTOCOL`) and the same checkpoint (the model
``fingerprint``): replicas report both, and the gateway refuses a mismatch in one line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from streamcap.core.constants import WINDOW_S
from streamcap.core.decode_types import DecodeResult, DecodingOptions
from streamcap.runtime.engines import DEFAULT_ENGINE
from streamcap.runtime.jobs import DecodeJob, JobKind, JobOutcome

__all__ = ["ClusterSpec", "ReplicaSpec"]

#: Bumped whenever a field below changes: a gateway and its replicas must agree.
PROTOCOL = 2


@dataclass(frozen=True)
class ReplicaSpec:
    """What one replica loads (the deployment's argument)."""

    model: str = "base"
    engine: str = DEFAULT_ENGINE  # a name of `runtime.engines` (one registered on import)
    assistant: str | None = None
    device: str = "auto"
    precision: str = "auto"
    threads: int = 1  # torch threads, and the replica's Ray num_cpus
    gpus: float = 0.0  # the replica's Ray num_gpus (> 0: CUDA)
    max_batch: int = 8
    language: str | None = None  # warm-up only
    protocol: int = PROTOCOL


@dataclass(frozen=True)
class ReplicaRequest:
    """One decode, self-contained (see the module docstring)."""

    key: str  # "<gateway>:<job id>": the same on every retry, the reply's name
    stream: str  # "<gateway>/<stream>": the replica's per-stream queue key
    kind: JobKind
    window: int
    audio: np.ndarray  # float32 mono 16 kHz, at most 30 s (read-only on the replica)
    options: DecodingOptions  # as prepared by the stream, prompt ids joined
    hypothesis: tuple[int, ...] | None = None
    context_s: float | None = None  # a partial's encoder context; None: the standard 30 s
    word_timestamps: bool = False
    protocol: int = PROTOCOL


@dataclass(frozen=True)
class ReplicaInfo:
    """Who served a request: a replica's identity, placement and model."""

    replica: str  # Serve's replica id (unique within the deployment)
    pid: int = 0
    node: str = ""
    model: str = ""
    fingerprint: str = ""
    device: str = ""
    precision: str = ""
    final_cost_s: float = 0.0  # warm-up's estimate of one final
    protocol: int = PROTOCOL


@dataclass(frozen=True)
class ReplicaReply:
    """A request's outcome as the replica saw it."""

    key: str
    replica: ReplicaInfo
    result: DecodeResult | None = None
    dropped: bool = False  # the replica's own scheduler dropped it (a stale partial)
    error: str | None = None  # the decode failed there (a bad job: not retried)
    encoder_s: float = 0.0
    decoder_s: float = 0.0
    compute_s: float = 0.0
    queued_s: float = 0.0  # inside the replica
    context_s: float = WINDOW_S
    batch: int = 1
    rechecked: int = 0
    queue_depth: int = 0  # the replica's waiting jobs when it answered


def job_of(request: ReplicaRequest, on_done: Callable[[DecodeJob, JobOutcome], None]) -> DecodeJob:
    """The local worker's job for ``request`` (on a replica, or the gateway's fallback)."""
    return DecodeJob(
        stream=request.stream,
        kind=request.kind,
        window=request.window,
        audio=request.audio,
        on_done=on_done,
        options=request.options,
        hypothesis=request.hypothesis,
        context_s=request.context_s,
        word_timestamps=request.word_timestamps,
    )


def reply_of(
    request: ReplicaRequest, outcome: JobOutcome, info: ReplicaInfo, queue_depth: int = 0
) -> ReplicaReply:
    """What a replica sends back for ``request`` decoded (or dropped, or failed) locally."""
    error = None
    if outcome.error is not None:
        error = f"{type(outcome.error).__name__}: {outcome.error}"
    return ReplicaReply(
        key=request.key,
        replica=info,
        result=outcome.result,
        dropped=outcome.dropped,
        error=error,
        encoder_s=outcome.encoder_s,
        decoder_s=outcome.decoder_s,
        compute_s=outcome.compute_s,
        queued_s=outcome.queued_s,
        context_s=outcome.context_s,
        batch=outcome.batch,
        rechecked=outcome.rechecked,
        queue_depth=queue_depth,
    )


def model_fingerprint(path: str) -> str:
    """A short hash of a checkpoint's config and tokenizer files (weights are too big to hash
    at every start; a different checkpoint of one architecture differs in its config)."""
    h = hashlib.sha256()
    folder = Path(path)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "vocab.json"):
        f = folder / name
        if f.is_file():
            h.update(name.encode())
            h.update(f.read_bytes())
    if not folder.is_dir():
        h.update(path.encode())  # a hub id not yet downloaded: its name
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class ClusterSpec:
    """Where the replicas are and how many to keep: what the gateway tells its bridge
    (`streamcap serve --backend ray` flags, or `streamcap replicas`)."""

    address: str = "auto"  # "auto" (a node of this machine) or HOST:PORT of the GCS
    app: str = "streamcap"  # the Serve application's name
    replica: ReplicaSpec = field(default_factory=ReplicaSpec)
    replicas: int | None = None  # a fixed number; None with min/max: autoscaling
    min_replicas: int | None = None
    max_replicas: int | None = None
    inflight: int = 2  # max_ongoing_requests per replica
    affinity: bool = True  # prefer the replica that served the stream last
    attempt_timeout_s: float = 60.0  # one send unanswered this long: lost (timeout)
    start_timeout_s: float = 300.0  # deploying: replicas RUNNING within this, or an error
    status_interval_s: float = 1.0
    owner: bool = False  # this gateway deployed the app: its bridge deletes it at the end

    @property
    def deploys(self) -> bool:
        """True when this spec says how many replicas to run (else: attach only)."""
        return self.replicas is not None or self.max_replicas is not None

    def autoscaling(self) -> dict[str, float] | None:
        """Serve's autoscaling config for ``--min/--max-replicas`` (queue depth: requests
        ongoing per replica, which the gateway keeps at most ``inflight``)."""
        if self.max_replicas is None:
            return None
        return {
            "min_replicas": self.min_replicas or 1,
            "max_replicas": self.max_replicas,
            "target_ongoing_requests": max(1.0, self.inflight / 2),
            "upscale_delay_s": 10.0,
            "downscale_delay_s": 120.0,
            "look_back_period_s": 15.0,  # longer than Serve's metrics interval (10 s)
        }
