"""The decoder on a busy machine: on one thread while one is cheaper, never another token.

A decoder step is a few hundred small operations (one token's matrix-vector products), and
each operation on two threads ends at a barrier where both threads meet. On a quiet machine
that is the faster way. When another program keeps a core busy, the thread that shares the
core with it is descheduled for milliseconds at a time and its partner waits at every
barrier: measured on the 2-core dev machine (Intel Xeon, AVX512-BF16 and AMX) beside one busy
process, the 17 recorded English dev clips decoded in 14.98 s on 2 threads and 4.55 s on 1
(3.3x; issue 38's note), and a live stream on two threads fell 57 s behind where one thread
kept every final within 1.7 s.

What "exact" means here decides how. A one-row decoder pass (a greedy step) gives the same
bits on 1 and on 2 threads (66 dev clips, every pass). A pass over several rows (the prompt, a
verified draft) is a matrix product that MKL splits differently on another thread count, so its
last bits differ, just as a verify pass's rows differ from greedy's one-row passes for the same
positions on one count (12 clips: 169 of 193 rows, at most 2.7e-4): the speculative decoder
has always been exact in its *tokens* (each accepted only as the model's greedy choice, proven
against `generate` on real speech), not in the bits of its hidden states. A decode on one
thread is held to the same proof: `tests/runtime/test_thread_strategies.py` compares decodes
on one thread, prompt and drafts included, with greedy `generate` on all of them, token for
token, and `eval_stream`'s exactness check compares every final of a busy run with greedy on
the full count. So by default (``one_is_exact``) a decode runs wholly on the count preferred
now. (MKL's strict reproducibility, ``MKL_CBWR=AUTO,STRICT`` set before torch starts, makes
every pass the same bits on every count, but costs a quiet machine's decoder 20-45 %: measured,
not used.) The option kept from before, ``one_is_exact=False``, drafts on one thread and has the
full count verify the whole draft in one pass, for whoever wants every token decided on all
threads; beside a busy process that verifying pass on two threads is what made it slow.

When: while one thread is preferred by what the engine follows (`free_cores.FreeCores`: the
cores the other programs leave free, read from the kernel; or `AdaptiveThreads.preferred`, the
encoder's measured choice), else as this strategy's own measurements per forward pass say. On a
GPU, or with one thread, there is nothing to choose (`PlainDecode`). Word timing (one more
pass, `Engine.align`) runs on the decoder's count of the moment (`threads_now`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Literal, Protocol

import torch

from streamcap.core.decode_types import DecodeResult
from streamcap.decoding.drafters import Drafter, HypothesisDrafter
from streamcap.decoding.verify import DraftLength
from streamcap.runtime.encoder_threads import AdaptiveThreads

__all__ = [
    "DecodeRun",
    "DecoderChoice",
    "DecoderThreads",
    "LoadFollowingDecode",
    "PlainDecode",
    "Preference",
    "on_threads",
]

#: How a live engine's decoder follows the load (`Engine.adapt_threads`): on the count preferred
#: now, a draft on one thread verified on all, or all threads always.
DecoderChoice = Literal["follow", "draft", "fixed"]

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

    def threads_now(self) -> int:
        """The count for work that follows the decoder's (word timing)."""
        ...

    def figures(self) -> dict[str, object]: ...


class PlainDecode:
    """Every decode on torch's thread count as set (the behaviour before issue 38)."""

    name = "plain"

    def decode(self, run: DecodeRun, drafter: Drafter, eot: int) -> DecodeResult:
        return run(drafter, None)

    def threads_now(self) -> int:
        return torch.get_num_threads()

    def figures(self) -> dict[str, object]:
        return {"strategy": self.name, "threads": torch.get_num_threads()}


@contextmanager
def on_threads(n: int) -> Iterator[None]:
    """torch on ``n`` threads inside the block, as it was after."""
    outside = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(outside)


class LoadFollowingDecode:
    """Decodes on ``threads`` (all of them) or, while one thread is cheaper, on one: the whole
    decode where ``one_is_exact`` (the decoder checked to give the same bits on one thread),
    else a draft on one that ``threads`` verify. Which count: ``follow``'s preferred count
    (the encoder's), or measured here (`AdaptiveThreads`, per forward pass), the other probed
    now and then."""

    name = "load-following"

    def __init__(
        self,
        threads: int,
        *,
        follow: Preference | None = None,
        one_is_exact: bool = True,
        probe_every: int = 12,
        timer: Callable[[], float] | None = None,
    ) -> None:
        if threads < 2:
            raise ValueError("a one-thread draft needs a full count of two or more threads")
        self.threads = threads
        self.follow = follow
        self.one_is_exact = one_is_exact
        self._timer = timer or time.perf_counter
        self.counts = AdaptiveThreads((1, threads), probe_every=probe_every, timer=self._timer)
        self.on_one = 0  # decodes on one thread (drafted there, unless one_is_exact)
        self.rejected = 0  # of those, where the full count chose another token somewhere

    def decode(self, run: DecodeRun, drafter: Drafter, eot: int) -> DecodeResult:
        follow = self.follow
        n = self.counts.choose() if follow is None else follow.preferred()
        t0 = self._timer()
        if n == self.threads:
            result = run(drafter, None)
        elif self.one_is_exact:
            with on_threads(1):
                result = run(drafter, None)
            self.on_one += 1
        else:
            result = self._drafted_on_one(run, drafter, eot)
            self.on_one += 1
        if follow is None:
            self.counts.record(n, self._timer() - t0, max(1, result.stats.forward_passes))
        return result

    def _drafted_on_one(self, run: DecodeRun, drafter: Drafter, eot: int) -> DecodeResult:
        with on_threads(1):
            draft = run(drafter, None)
        whole = len(draft.tokens) + 1  # its tokens and end-of-text: one pass when all agree
        with on_threads(self.threads):
            result = run(HypothesisDrafter(draft.tokens, eot=eot), DraftLength(whole, 2, whole))
        if result.tokens != draft.tokens:
            self.rejected += 1
        # the decode's time is both runs': the cost model and the figures see what it took
        s, d = result.stats, draft.stats
        passes, seconds = s.forward_passes + d.forward_passes, s.decoder_s + d.decoder_s
        return replace(result, stats=replace(s, forward_passes=passes, decoder_s=seconds))

    def threads_now(self) -> int:
        if not self.one_is_exact:
            return self.threads  # a pass nobody verifies stays on the full count
        return self.counts.preferred() if self.follow is None else self.follow.preferred()

    def figures(self) -> dict[str, object]:
        on_one = "decoded_on_1" if self.one_is_exact else "drafted_on_1"
        figures: dict[str, object] = {
            "strategy": self.name,
            "follows_encoder": self.follow is not None,
            on_one: self.on_one,
        }
        if not self.one_is_exact:
            figures["draft_changed"] = self.rejected
        return figures
