"""Side-by-side timings of the decoder step's two halves, on real decoder states.

1. Decoder stack: transformers' ``WhisperDecoder`` forward vs streamcap's lean forward
   (``streamcap/decoding/lean.py``), for 1..16 new rows over a cache, with the hidden states
   checked bit for bit.
2. Vocabulary projection: the full fp32 projection + argmax vs the bounded screen
   (``streamcap/decoding/screen.py``; int8 for a few rows, bf16 for more), choices checked equal.

Timings are medians of many repetitions in one run; compare the ratios, not the absolute times.

    python scripts/bench_kernels.py [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from streamcap.evaluation.paths import TEST_DATA


def median_ms(fn: Callable[[], object], reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


@dataclass
class Steps:
    """The two decoder steps compared, on one clip's encoder output and tokens."""

    dec: Any  # streamcap's step: the lean stack and the screen
    hf: Any  # transformers' WhisperDecoder forward, no screen
    enc: torch.Tensor
    tokens: list[int]
    screen: Any


def prepare(args: argparse.Namespace) -> Steps:
    """The bundled model's two decoder steps, and the decoder's input on real speech."""
    from streamcap.audio.file import load_audio
    from streamcap.core.decode_types import DecodingOptions
    from streamcap.decoding.screen import ScreenedProjection
    from streamcap.decoding.speculative import SpeculativeDecoder
    from streamcap.runtime.engine import Engine

    torch.set_grad_enabled(False)
    engine = Engine(args.model, None, "cpu", args.threads)
    dec = engine.decoder.step
    hf = SpeculativeDecoder(
        engine.main.model, engine.main.processor, "cpu", torch.float32, lean=False, screen=False
    ).step
    assert dec.lean is not None
    audio = load_audio(TEST_DATA / "en_real_jfk.wav")
    enc = engine.encode(audio, context_s=args.context)
    opts = DecodingOptions(language="en")
    result = engine.decode(enc, opts, drafter="none")
    tokens = dec.spec.prefix(dec.spec.language_id("en"), opts) + list(result.tokens)
    screen = dec.screen or ScreenedProjection(dec.proj_out.weight)
    return Steps(dec, hf, enc.enc, tokens, screen)


def time_rows(s: Steps, n: int, reps: int) -> dict[str, float]:
    """Both forwards and both projections for ``n`` new rows over 8 cached positions, their
    outputs checked equal first."""
    dec, hf, enc = s.dec, s.hf, s.enc
    base = 8  # positions already in the cache before the timed step
    step = (s.tokens * 3)[base : base + n]
    hf_cache, lean_cache = hf.new_cache(), dec.lean.new_cache()
    hf.forward(s.tokens[:base], hf_cache, enc)
    dec.lean.forward(s.tokens[:base], lean_cache, enc)

    def hf_step(c: Any = hf_cache, t: list[int] = step) -> torch.Tensor:
        h: torch.Tensor = hf.forward(t, c, enc)
        c.crop(-len(t))
        return h

    def lean_step(c: Any = lean_cache, t: list[int] = step) -> torch.Tensor:
        h: torch.Tensor = dec.lean.forward(t, c, enc)
        c.crop(-len(t))
        return h

    rows = lean_step()
    assert torch.equal(rows, hf_step()), "lean forward is not bit-identical"
    banned = [dec.suppress_mask] * n

    def full_proj(r: torch.Tensor = rows) -> list[int]:
        logits = dec.logits(r)
        logits.masked_fill_(dec.suppress_mask, -math.inf)
        return logits.argmax(-1).tolist()

    def screened(r: torch.Tensor = rows, b: list[Any] = banned) -> list[int]:
        return s.screen.choose(r, b)[1]

    _, choices, sizes = s.screen.choose(rows, banned)
    assert choices == full_proj(), "screen disagrees with the fp32 argmax"
    return {
        "hf_forward_ms": median_ms(hf_step, reps),
        "lean_forward_ms": median_ms(lean_step, reps),
        "fp32_projection_ms": median_ms(full_proj, reps),
        "screen_ms": median_ms(screened, reps),
        "candidates_mean": sum(sizes) / len(sizes),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="base")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--context", type=float, default=None, help="shortened audio context, s")
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()

    from streamcap.decoding.screen import cpu_bf16_is_fast

    steps = prepare(args)
    rows: dict[int, dict[str, float]] = {}
    out: dict[str, object] = {"model": args.model, "threads": args.threads, "rows": rows}
    print(
        f"{'rows':>4s} {'HF fwd':>8s} {'lean fwd':>9s} {'ratio':>6s}   "
        f"{'fp32 proj':>9s} {'screen':>7s} {'ratio':>6s} {'cands':>6s}"
    )
    for n in (1, 2, 4, 8, 16):
        t = rows[n] = time_rows(steps, n, args.reps)
        print(
            f"{n:4d} {t['hf_forward_ms']:8.2f} {t['lean_forward_ms']:9.2f} "
            f"{t['hf_forward_ms'] / t['lean_forward_ms']:5.2f}x   "
            f"{t['fp32_projection_ms']:9.2f} {t['screen_ms']:7.2f} "
            f"{t['fp32_projection_ms'] / t['screen_ms']:5.2f}x {t['candidates_mean']:6.1f}"
        )
    print(
        f"bf16 native on this CPU: {cpu_bf16_is_fast()}; hidden states bit-identical; "
        "screen choices equal the fp32 argmax"
    )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
