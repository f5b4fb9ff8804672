"""The caption-sink port: what a program that takes a stream's captions elsewhere is to the
server (YouTube Live, Zoom, OBS, ...).

A sink is handed the captions of one stream, one at a time and in the stream's order (its
`seq`), as viewers see them: the speaker already shown by the stream's renames
(`core.speaker_names.renamed`). Partials only if it asks for them (`wants_partials`), and then
coalesced: a sink that is behind gets the latest partial, never a backlog of stale ones.
Finals are never dropped silently (`runner.SinkRunner` logs and counts a queue that
overflows). ``deliver`` may be slow or fail: each sink runs in its own task with its own
queue (`runner.SinkRunner`), so a sink that never answers holds up nothing but itself.

A sink's ``name`` is what logs and /metrics call it ("youtube:main"): never its URL, key or
password, which are secrets. An error a sink raises is logged by its type only, unless it is a
`SinkError`, whose message the sink promises holds no secret (a URL's query carries YouTube's
and Zoom's keys; an exception from an HTTP library may quote it).

A new sink is a module with a class that has these four members and one
`registry.register_sink` call (docs/broadcast.md); the server builds one per stream from
``serve``'s flags or its config file (a `SinkSpec` each: `registry.sinks_from`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from streamcap.core.captions import Caption

__all__ = ["CaptionSink", "SinkError", "SinkSpec"]


class SinkError(Exception):
    """A delivery that failed for a reason the sink can say without a secret: its message is
    logged as it is (e.g. "HTTP 500 after 5 tries")."""


@runtime_checkable
class CaptionSink(Protocol):
    """Where one stream's captions go besides the viewers (see the module docstring)."""

    @property
    def name(self) -> str:
        """What logs and /metrics call this sink: its kind and stream ("youtube:main"), never
        its target (a URL with a key, a password)."""
        ...

    @property
    def wants_partials(self) -> bool:
        """True: partials too (the latest one waiting replaces an older one); False: finals
        only."""
        ...

    async def deliver(self, caption: Caption) -> None:
        """Take one caption (a final, or a partial if `wants_partials`), in seq order. It may
        take long (retries, a slow service) and it may raise: the runner logs and counts the
        failure and goes on with the next caption. It is never called again before it
        returns, and it must not block the event loop (blocking I/O goes to a thread)."""
        ...

    async def aclose(self) -> None:
        """Let go of connections and threads; called once, at shutdown, after the last
        `deliver` (or after it was cancelled)."""
        ...


@dataclass(frozen=True, repr=False)
class SinkSpec:
    """One sink of one stream as configured: its kind (a registered name), the stream whose
    captions it gets, its target (a URL, an address; maybe a secret) and options (kind's own:
    ``("lang", "en-US")``, a password). Its repr and `label` never show target or options."""

    kind: str
    stream: str
    target: str = ""
    options: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """What logs and /metrics call it: ``kind:stream``."""
        return f"{self.kind}:{self.stream}"

    def option(self, key: str, default: str = "") -> str:
        return dict(self.options).get(key, default)

    def __repr__(self) -> str:
        return f"SinkSpec({self.label!r})"
