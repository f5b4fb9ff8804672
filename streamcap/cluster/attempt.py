"""A decode the gateway sends, and sends again: its request, where it went, how often.

Its own module because a resend must be the identical request (`cluster.wire`: then any replica
decodes exactly what the lost attempt would have): the request is built once, from the job's
``prepare``, at the first send, and kept with the attempt; the scheduler (`cluster.remote`)
only decides when and where it goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamcap.runtime.jobs import DecodeJob, Tokenizes

from .wire import ReplicaRequest


@dataclass
class Attempt:
    """A job sent (or to be resent): its request, where it went, how often."""

    job: DecodeJob
    request: ReplicaRequest | None  # None until prepared (at its first send)
    via: str  # "remote" or "fallback"
    sent_at: float = 0.0
    attempts: int = 1
    replica: str | None = None  # where the router put it, once known

    def build_request(self, key: str, gateway: str, model: Tokenizes) -> ReplicaRequest:
        """The request, from the job's ``prepare`` with ``model``'s tokenizer (at the first
        send only: a resend is the identical request)."""
        job = self.job
        options, hypothesis = job.prepared(model)
        return ReplicaRequest(
            key=key,
            stream=f"{gateway}/{job.stream}",
            kind=job.kind,
            window=job.window,
            audio=job.audio,
            options=options,
            hypothesis=hypothesis,
            context_s=job.context_s,
            word_timestamps=job.word_timestamps,
        )


def request_key(gateway: str, job: DecodeJob) -> str:
    """A request's name: the same on every resend, and its reply's."""
    return f"{gateway}:{job.id}"
