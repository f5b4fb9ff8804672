"""The gateway's rules for remote decodes (`RemoteConfig`), apart from the scheduler.

Its own module because the command line builds it from its flags (`cli.cluster`) and tests set
it, without needing the scheduler's state machine (`cluster.remote`, whose docstring says what
each rule does).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RemoteConfig"]


@dataclass(frozen=True)
class RemoteConfig:
    """The gateway's rules for remote decodes (`cluster.remote`'s docstring)."""

    replica_inflight: int = 2  # requests in flight per replica (= Serve max_ongoing_requests)
    final_deadline_s: float = 120.0  # a final undecoded this long is delivered as an error
    fallback_after_s: float = 5.0  # no usable replica this long: use the fallback, if any
    max_attempts: int = 5  # sends of one final before it is given up as an error
    start_timeout_s: float = 300.0  # warm_up: wait this long for the first usable replica

    def __post_init__(self) -> None:
        if self.replica_inflight < 1:
            raise ValueError("replica_inflight must be at least 1")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
