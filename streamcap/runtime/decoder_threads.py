"""The decoder on a busy machine: a draft on one thread, every token decided on all of them.

A decoder step is a few hundred small operations (one token's matrix-vector products), and
each operation on two threads ends at a barrier where both threads meet. On a quiet machine
that is the faster way. When another program keeps a core busy, the thread that shares the
core with it is descheduled for milliseconds at a time and its partner waits at every
barrier: measured on the 2-core dev machine (Intel Xeon, AVX512-BF16 and AMX) beside one busy
process, the 17 recorded English dev clips decoded in 14.98 s on 2 threads and 4.55 s on 1
(3.3x; issue 38's note).

A decode on one thread cannot simply replace the one on all threads: a pass over several
rows (a draft verified) is a matrix product whose sums are split differently on another thread
count, so its hidden states differ in their last bits (measured: a 24-row pass on 1 and on 2
threads; a one-row pass happened to agree), and where two tokens are nearly tied the greedy
choice could differ. So the one-thread decode is only a *draft*: its tokens (and end-of-text)
are then verified by the main model on the full thread count in one forward pass, exactly as a
draft from the previous hypothesis is (`decoding.verify`): every token of the result is the
full count's own greedy choice, the tokens greedy decoding gives on all threads whatever the
load. A whole draft accepted costs one pass at the full count on top of the draft (0.16 s a
clip there, busy); a rejected token costs what any rejected draft costs.

When: while one thread is preferred by what the engine follows (`free_cores.FreeCores`: the
cores the other programs leave free, read from the kernel; or `AdaptiveThreads.preferred`, the
encoder's measured choice), else as this strategy's own measurements per forward pass say. On a
GPU, or with one thread, there is nothing to choose (`PlainDecode`).

An option, not the default (`Engine.adapt_threads(draft_on_one=True)`): beside one busy process
it bounded the worst final (lf3's first 150 s, simulated clock, with `FreeCores`: worst 4.4 to
6.3 s in three runs, against 3.7 to 141 s in five on two threads), but the one-thread draft and
the verifying pass cost more than two threads do most of the time, and on the real clock finals
came later (one publisher: p95 2.22 s against 1.68 s; two: 3.63 s against 2.75 s; issue 38).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Protocol

import torch

from streamcap.core.decode_types import DecodeResult
from streamcap.decoding.drafters import Drafter, HypothesisDrafter
from streamcap.decoding.verify import DraftLength
from streamcap.runtime.encoder_threads import AdaptiveThreads

__all__ = ["DecodeRun", "DecoderThreads", "LoadFollowingDecode", "PlainDecode", "Preference"]

#: Runs the decoder loop on the calling thread's torch settings with a drafter (and, where
#: given, a draft length): what `Engine.decode` hands the strategy.
DecodeRun = Callable[[Drafter, DraftLength | None], DecodeResult]


class Preference(Protocol):
    """What the decoder may follow: a count preferred now (the encoder's strategy)."""

    def preferred(self) -> int: ...


class DecoderThreads(Protocol):
    """The strategy: one decode (``strategy.decode(run, drafter, eot)``)."""

    name: str

    def decode(self, run: DecodeRun, drafter: Drafter, eot: int) -> DecodeResult: ...

    def figures(self) -> dict[str, object]: ...


class PlainDecode:
    """Every decode on torch's thread count as set (the behaviour before issue 38)."""

    name = "plain"

    def decode(self, run: DecodeRun, drafter: Drafter, eot: int) -> DecodeResult:
        return run(drafter, None)

    def figures(self) -> dict[str, object]:
        return {"strategy": self.name, "threads": torch.get_num_threads()}


@contextmanager
def _threads(n: int) -> Iterator[None]:
    outside = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(outside)


class LoadFollowingDecode:
    """Decodes on ``threads`` (all of them) or, while one thread is cheaper, drafts on one and
    verifies on ``threads``. Which: ``follow``'s preferred count (the encoder's), or measured
    here (`AdaptiveThreads`, per forward pass), the other probed now and then."""

    name = "load-following"

    def __init__(
        self,
        threads: int,
        *,
        follow: Preference | None = None,
        probe_every: int = 12,
        timer: Callable[[], float] | None = None,
    ) -> None:
        if threads < 2:
            raise ValueError("a one-thread draft needs a full count of two or more threads")
        self.threads = threads
        self.follow = follow
        self._timer = timer or time.perf_counter
        self.counts = AdaptiveThreads((1, threads), probe_every=probe_every, timer=self._timer)
        self.on_one = 0  # decodes drafted on one thread
        self.rejected = 0  # of those, where the full count chose another token somewhere

    def decode(self, run: DecodeRun, drafter: Drafter, eot: int) -> DecodeResult:
        follow = self.follow
        n = self.counts.choose() if follow is None else follow.preferred()
        t0 = self._timer()
        if n == self.threads:
            result = run(drafter, None)
        else:
            result = self._drafted_on_one(run, drafter, eot)
            self.on_one += 1
        if follow is None:
            self.counts.record(n, self._timer() - t0, max(1, result.stats.forward_passes))
        return result

    def _drafted_on_one(self, run: DecodeRun, drafter: Drafter, eot: int) -> DecodeResult:
        with _threads(1):
            draft = run(drafter, None)
        whole = len(draft.tokens) + 1  # its tokens and end-of-text: one pass when all agree
        with _threads(self.threads):
            result = run(HypothesisDrafter(draft.tokens, eot=eot), DraftLength(whole, 2, whole))
        if result.tokens != draft.tokens:
            self.rejected += 1
        # the decode's time is both runs': the cost model and the figures see what it took
        s, d = result.stats, draft.stats
        passes, seconds = s.forward_passes + d.forward_passes, s.decoder_s + d.decoder_s
        return replace(result, stats=replace(s, forward_passes=passes, decoder_s=seconds))

    def figures(self) -> dict[str, object]:
        return {
            "strategy": self.name,
            "follows_encoder": self.follow is not None,
            "drafted_on_1": self.on_one,
            "draft_changed": self.rejected,
        }
