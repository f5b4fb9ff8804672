"""The stand-in decoder of scripts/policy_replay.py: real segmenter, invented words.

`record_standin` drives a recording policy (`policy_trace.make_recorder`) with the real
segmenter on a file and `StandIn` for a decoder on a single worker that picks jobs in a random
order and drops some, so that voided early finals, late partials of closed windows and the like
come up often (see scripts/policy_replay.py).
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np

from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.decode_types import DecodeResult, WordTiming
from streamcap.core.policy_config import PolicyConfig
from streamcap.core.policy_window import DecodeRequest, Step
from streamcap.core.segmenter import Segmenter, SegmenterConfig
from streamcap.evaluation.policy_trace import Call, make_recorder

SR = SAMPLE_RATE

_WORDS = (
    "the a to of and we you it said when there Mr. time people call number "
    "again please menu press say hello world morning yesterday country ask what your can do for"
)
VOCAB = _WORDS.split()


class StandIn:
    """Hears a word in every loud 0.3 s slot of the file (see the module docstring)."""

    def __init__(self, audio: np.ndarray, rng: random.Random, slot: float = 0.3) -> None:
        n = int(slot * SR)
        rms = [
            float(np.sqrt(np.mean(audio[i : i + n] ** 2) + 1e-12)) for i in range(0, len(audio), n)
        ]
        loud = 0.25 * float(np.percentile(rms, 90))
        self.rng = rng
        self.words: list[tuple[str, float, float]] = []
        for k, level in enumerate(rms):
            if level >= loud:
                h = (k * 2654435761) % 2**32
                word = VOCAB[h % len(VOCAB)] + ("." if h % 7 == 0 else "," if h % 11 == 0 else "")
                self.words.append((word, k * slot + 0.02, k * slot + slot - 0.04))

    def __call__(self, req: DecodeRequest) -> DecodeResult:
        rng, eps = self.rng, 1e-4
        heard = [w for w in self.words if w[1] >= req.start - eps and w[2] <= req.end + eps]
        if req.kind == "partial":
            cut = [w for w in self.words if w[1] < req.end < w[2] - eps]
            if cut:
                heard.append((cut[0][0][: 1 + int(req.end * 37) % 3] + "~", cut[0][1], req.end))
            if heard and rng.random() < 0.15:  # another case or mark for the last word
                w = heard[-1]
                heard[-1] = (w[0].capitalize() + rng.choice(["", ".", ","]), w[1], w[2])
        if not heard:
            roll = rng.random()
            if roll < 0.4:
                return DecodeResult((), "", "en", 0.9, -1.2, "eot")
            if roll < 0.7:
                return DecodeResult((50,), " Thank you.", "en", 0.7, -0.5, "eot")
            return DecodeResult((), "", "en", 0.1, None, "eot")
        texts = [w[0] for w in heard]
        stopped = "eot"
        if rng.random() < 0.03:
            texts, stopped = texts + texts[-2:] * 4, "loop"
        tokens = tuple(sum(map(ord, t)) % 50000 for t in texts)
        result = DecodeResult(tokens, " " + " ".join(texts), "en", 0.05, -0.3, stopped)
        if req.words and rng.random() < 0.9 and stopped == "eot":
            timed = tuple(
                WordTiming(" " + t, max(0.0, a - req.start), b - req.start, 0.9)
                for t, (_, a, b) in zip(texts, heard, strict=True)
            )
            result = replace(result, words=timed)
        return result


def record_standin(
    audio: np.ndarray,
    config: PolicyConfig,
    seg: SegmenterConfig,
    early: str,
    seed: int,
    order: str = "finals",
) -> list[Call]:
    calls: list[Call] = []
    rng = random.Random(seed)
    pol = make_recorder(calls)(config)
    decoder = StandIn(audio, rng)
    segmenter = Segmenter(seg)
    queue: list[DecodeRequest] = []
    busy = 0.0

    def apply(step: Step) -> None:
        queue.extend(step.requests)
        pol.take_drops()

    def run_until(t: float) -> None:
        nonlocal busy
        while queue and busy < t:
            first = [r for r in queue if (r.kind == "final") == order.startswith("finals")]
            req = first[0] if first and rng.random() < 0.8 else rng.choice(queue)
            queue.remove(req)
            if rng.random() < 0.08:  # dropped by the worker: no result
                apply(pol.on_result(req, None, busy))
                continue
            pol.prepare(req)
            slow = 4.0 if order.endswith("slow") else 1.0
            busy += slow * rng.uniform(0.02, 0.25 + 0.03 * (req.end - req.start))
            apply(pol.on_result(req, decoder(req), busy))

    chunk = int(0.1 * SR)
    use_early = early != "off"
    for i in range(0, len(audio), chunk):
        t = (i + chunk) / SR
        busy = max(busy, t - 0.1)
        run_until(t)
        if early == "flip" and rng.random() < 0.05:
            use_early = not use_early
        for ev in segmenter.push(audio[i : i + chunk]):
            apply(pol.on_event(ev, t))
        apply(pol.on_tick(segmenter.time, t, use_early))
    end = len(audio) / SR
    for ev in segmenter.flush():
        apply(pol.on_event(ev, end))
    apply(pol.finish(end))
    run_until(float("inf"))
    return calls
