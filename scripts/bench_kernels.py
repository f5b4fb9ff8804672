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
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def median_ms(fn: Callable[[], object], reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="base")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--context", type=float, default=None, help="shortened audio context, s")
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()

    from streamcap.audio.file import load_audio
    from streamcap.decoding import DecodingOptions
    from streamcap.decoding.screen import ScreenedProjection, cpu_bf16_is_fast
    from streamcap.decoding.speculative import SpeculativeDecoder
    from streamcap.runtime.engine import Engine

    torch.set_grad_enabled(False)
    engine = Engine(args.model, None, "cpu", args.threads)
    dec = engine.decoder.step
    hf = SpeculativeDecoder(
        engine.main.model, engine.main.processor, "cpu", torch.float32, lean=False, screen=False
    ).step
    assert dec.lean is not None
    audio = load_audio(ROOT / "tests" / "data" / "en_real_jfk.wav")
    enc = engine.encode(audio, context_s=args.context)
    opts = DecodingOptions(language="en")
    result = engine.decode(enc, opts, drafter="none")
    tokens = dec.spec.prefix(dec.spec.language_id("en"), opts) + list(result.tokens)
    base = 8  # positions already in the cache before the timed step
    out: dict[str, object] = {"model": args.model, "threads": args.threads, "rows": {}}

    print(
        f"{'rows':>4s} {'HF fwd':>8s} {'lean fwd':>9s} {'ratio':>6s}   "
        f"{'fp32 proj':>9s} {'screen':>7s} {'ratio':>6s} {'cands':>6s}"
    )
    screen = dec.screen or ScreenedProjection(dec.proj_out.weight)
    for n in (1, 2, 4, 8, 16):
        step = (tokens * 3)[base : base + n]
        hf_cache, lean_cache = hf.new_cache(), dec.lean.new_cache()
        hf.forward(tokens[:base], hf_cache, enc.enc)
        dec.lean.forward(tokens[:base], lean_cache, enc.enc)

        def hf_step(c=hf_cache, s=step) -> torch.Tensor:
            h = hf.forward(s, c, enc.enc)
            c.crop(-len(s))
            return h

        def lean_step(c=lean_cache, s=step) -> torch.Tensor:
            h = dec.lean.forward(s, c, enc.enc)
            c.crop(-len(s))
            return h

        rows = lean_step()
        assert torch.equal(rows, hf_step()), "lean forward is not bit-identical"
        banned = [dec.suppress_mask] * n

        def full_proj(r=rows) -> list[int]:
            logits = dec.logits(r)
            logits.masked_fill_(dec.suppress_mask, -math.inf)
            return logits.argmax(-1).tolist()

        def screened(r=rows, b=banned) -> list[int]:
            return screen.choose(r, b)[1]

        _, choices, sizes = screen.choose(rows, banned)
        assert choices == full_proj(), "screen disagrees with the fp32 argmax"
        t = {
            "hf_forward_ms": median_ms(hf_step, args.reps),
            "lean_forward_ms": median_ms(lean_step, args.reps),
            "fp32_projection_ms": median_ms(full_proj, args.reps),
            "screen_ms": median_ms(screened, args.reps),
            "candidates_mean": sum(sizes) / len(sizes),
        }
        out["rows"][n] = t  # type: ignore[index]
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
