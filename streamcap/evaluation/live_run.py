"""One recording replayed through the live pipeline: `LiveStream` on an `InferenceWorker`.

Exactly what the product runs for a live source (scripts/eval_stream.py, eval_meeting.py,
codec_agreement.py --captions and policy_replay.py --decoder model replay files with it), on the
computation-aware `SimulatedClock` or the `RealClock` (docs/design.md, "Clocks"). The run
returns its timeline (each caption with the stream time it was emitted), its decodes and its
compute: the metrics (`metrics.evaluate`) are computed apart from it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from streamcap.audio.vad import make_vad
from streamcap.core.captions import Caption, CaptionLog
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.live_config import LiveConfig
from streamcap.core.policy import CaptionPolicy
from streamcap.core.stream import StreamProtocol
from streamcap.runtime.caption_stage import CaptionStage
from streamcap.runtime.clock import RealClock, SimulatedClock
from streamcap.runtime.engine import Engine, options_for
from streamcap.runtime.jobs import DecodeJob, JobOutcome
from streamcap.runtime.replay import replay
from streamcap.runtime.stream import LiveStream
from streamcap.runtime.worker import InferenceWorker, encode_window

SR = SAMPLE_RATE


def run_stream(
    engine: Engine,
    audio: np.ndarray,
    config: LiveConfig,
    clock_kind: str,
    chunk_s: float,
    timer: str = "wall",
    stage: Callable[[Any], CaptionStage] | None = None,
    policy: CaptionPolicy | None = None,
) -> dict[str, Any]:
    """Replay `audio` through one live stream; `stage(clock)` makes a caption stage for it
    (scripts/eval_meeting.py's speaker labeller), returned as ``run["stage"]``; ``policy``
    replaces the stream's caption policy (`policy_replay`'s recorder)."""
    worker = InferenceWorker(engine)
    if clock_kind == "simulated":
        clock: SimulatedClock | RealClock = SimulatedClock(
            timer=time.thread_time if timer == "thread" else time.perf_counter
        )
    else:
        clock = RealClock()
    events: list[tuple[float, Caption]] = []
    decodes: list[tuple[DecodeJob, JobOutcome]] = []
    sink = CaptionLog("eval")  # the stream's one sequence
    made = stage(clock) if stage is not None else None
    protocol = StreamProtocol(config, make_vad(config.segmenter), policy)
    stream = LiveStream("eval", worker, None, config, clock, made, protocol=protocol)
    stream.on_caption = lambda ev: events.append((stream.now(), sink.add(ev)))
    stream.decode_observer = lambda job, out: decodes.append((job, out))
    feed_s = 0.0
    plain_feed = stream.feed

    def timed_feed(samples: np.ndarray) -> None:
        nonlocal feed_s
        t0 = time.perf_counter()
        plain_feed(samples)
        feed_s += time.perf_counter() - t0

    stream.feed = timed_feed  # type: ignore[method-assign]
    wall0 = time.perf_counter()
    replay(stream, audio, chunk_s=chunk_s)
    wall = time.perf_counter() - wall0
    if worker.threaded:
        worker.stop()
    if stream.errors:
        raise RuntimeError(f"decode errors: {stream.errors[:3]}")
    total = worker.total_stats()
    return {
        "events": events,
        "decodes": decodes,
        "worker": total.as_dict(),
        "early_finals": stream.protocol.early_finals,
        "language": stream.language,
        "finals_dropped": stream.protocol.drops,
        "load_shed": {
            "time_in_s": {k: round(v, 2) for k, v in stream.protocol.load.time_in.items()},
            "changes": stream.protocol.load.changes,
            "worst_behind_s": round(stream.protocol.load.worst_s, 2),
        },
        "stage": made,
        "feed_s": feed_s,
        "wall_s": wall,
        "compute_s": total.compute_s + feed_s,
    }


def warm_up(engine: Engine, audio: np.ndarray, language: str | None) -> None:
    """First calls allocate and pick kernels: keep that out of the measured stream."""
    opts = options_for(engine, language, "transcribe")
    clip = audio[: 3 * SR]
    engine.decode(engine.encode(clip), opts)
    engine.decode(encode_window(engine, clip, 5.0), opts)
