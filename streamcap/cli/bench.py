"""Benchmark (``streamcap bench``, ``scripts/bench_decoding.py``): plain greedy vs speculative.

For each utterance the audio is replayed as a live stream: the growing window is decoded every
``--step`` seconds and once more at the end (the final), once with plain greedy ``generate`` and
once with the speculative decoder drafting from its previous hypothesis, in the same run, on the
same encoder output. Every decode is checked token for token. Also reported: our own decoder
loop without any draft (to separate the loop's gain from drafting's), and with ``--assistant``
transformers' assisted ``generate`` and our model drafter. Partial windows are encoded on a
shortened audio context as the live pipeline does (``--full-context`` for the standard 30 s
input everywhere); finals always get the standard input.

    python scripts/bench_decoding.py --manifest ../shared/eval-dev/manifest.jsonl \
        --lang en --kind real --step 1.0 --json out/bench.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from streamcap.core.policy import PARTIAL_CONTEXT_MARGIN_S, PARTIAL_CONTEXT_MIN_S

SR = 16000


def windows(duration: float, step: float) -> list[float]:
    ends = list(np.arange(step, duration, step)) if step > 0 else []
    return [*ends, duration]


def add_bench_arguments(ap: argparse.ArgumentParser, *, model_flags: bool = True) -> None:
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--lang", default=None, help="only utterances of this language")
    ap.add_argument("--kind", default=None, help="only this kind (real, tts, ...)")
    ap.add_argument("--step", type=float, default=1.0)
    if model_flags:
        ap.add_argument("--model", default="base")
        ap.add_argument("--assistant", default=None)
        ap.add_argument("--device", default="auto")
        ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--max-duration", type=float, default=30.0)
    ap.add_argument(
        "--partial-context-margin",
        type=float,
        default=PARTIAL_CONTEXT_MARGIN_S,
        help="encode partial windows (not the final) with an audio context of their length "
        "plus this margin, as the live pipeline does (default %(default)s s); all columns "
        "share that encoder output",
    )
    ap.add_argument("--partial-context-min", type=float, default=PARTIAL_CONTEXT_MIN_S)
    ap.add_argument(
        "--full-context",
        dest="partial_context_margin",
        action="store_const",
        const=None,
        help="encode every window on Whisper's standard 30 s input instead",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_bench_arguments(ap)
    return run_bench(ap.parse_args(argv))


def run_bench(args: argparse.Namespace) -> int:
    import torch

    from streamcap.audio.file import load_audio
    from streamcap.decoding.options import DecodingOptions
    from streamcap.decoding.reference import reference_decode
    from streamcap.runtime.engine import Engine

    torch.set_grad_enabled(False)

    engine = Engine(args.model, args.assistant, args.device, args.threads)
    base = Path(args.manifest).parent
    lines = Path(args.manifest).read_text().splitlines()
    items = [json.loads(line) for line in lines if line.strip()]
    items = [
        d
        for d in items
        if (args.lang is None or d.get("lang") == args.lang)
        and (args.kind is None or d.get("kind") == args.kind)
        and d.get("duration", 0) <= args.max_duration
    ]
    if args.limit:
        items = items[: args.limit]
    if not items:
        print("no utterances match", file=sys.stderr)
        return 2

    warm = load_audio(base / items[0]["audio"])[: 2 * SR]
    for _ in range(2):  # warm up both paths so the first timing is not an outlier
        enc = engine.encode(warm)
        reference_decode(engine.decoder, enc.enc, DecodingOptions(language="en"), enc.duration_s)
        engine.decode(enc, DecodingOptions(language="en"), drafter="none")

    cols = ["plain", "loop", "spec"] + (["hf_assist", "model"] if args.assistant else [])
    totals = {c: 0.0 for c in cols}
    passes = {"plain": 0, "loop": 0, "spec": 0, "model": 0}
    drafted = accepted = decodes = 0
    encoder_s = 0.0
    identical = True
    rows = []
    for item in items:
        audio = load_audio(base / item["audio"])
        opts = DecodingOptions(language=item.get("lang") if engine.multilingual else None)
        prev: tuple[int, ...] = ()
        row = {c: 0.0 for c in cols} | {"id": item["id"], "decodes": 0, "identical": True}
        ends = windows(len(audio) / SR, args.step)
        for i, end in enumerate(ends):
            context = None
            if args.partial_context_margin is not None and i < len(ends) - 1:
                context = max(args.partial_context_min, end + args.partial_context_margin)
            enc = engine.encode(audio[: int(end * SR)], context_s=context)
            encoder_s += enc.encoder_s
            ref, ref_stats = reference_decode(engine.decoder, enc.enc, opts, enc.duration_s)
            loop = engine.decode(enc, opts, drafter="none")
            spec = engine.decode(enc, opts, hypothesis=prev, drafter="hypothesis")
            times = {
                "plain": ref_stats.decoder_s,
                "loop": loop.stats.decoder_s,
                "spec": spec.stats.decoder_s,
            }
            ok = list(spec.tokens) == ref and list(loop.tokens) == ref
            passes["plain"] += len(ref) + 1 + (1 if opts.language is None else 0)
            passes["loop"] += loop.stats.forward_passes
            passes["spec"] += spec.stats.forward_passes
            drafted += spec.stats.drafted
            accepted += spec.stats.accepted
            if args.assistant:
                t0 = time.perf_counter()
                hf, _ = reference_decode(
                    engine.decoder,
                    enc.enc,
                    opts,
                    enc.duration_s,
                    assistant_model=engine.assistant_model,
                )
                times["hf_assist"] = time.perf_counter() - t0
                md = engine.decode(enc, opts, drafter="model")
                times["model"] = md.stats.decoder_s
                passes["model"] += md.stats.forward_passes
                ok = ok and list(md.tokens) == ref and hf == ref
            for c in cols:
                row[c] += times[c]
                totals[c] += times[c]
            row["decodes"] += 1
            row["identical"] = row["identical"] and ok
            identical = identical and ok
            decodes += 1
            prev = spec.tokens
        row["text"] = engine.spec.tokenizer.decode(list(prev), skip_special_tokens=True)
        rows.append(row)
        print(
            f"{item['id'][:28]:28s} n={row['decodes']:3d} plain {row['plain']:6.2f}s "
            f"loop {row['loop']:6.2f}s spec {row['spec']:6.2f}s  x{row['plain'] / row['spec']:4.2f}"
            f"{'' if row['identical'] else '  MISMATCH'}",
            flush=True,
        )
    result = {
        "model": args.model,
        "assistant": args.assistant,
        "device": engine.placement.device,
        "step": args.step,
        "partial_context_margin": args.partial_context_margin,
        "identical": identical,
        "utterances": len(items),
        "decodes": decodes,
        "encoder_s": round(encoder_s, 3),
        "plain_decoder_s": round(totals["plain"], 3),
        "loop_decoder_s": round(totals["loop"], 3),
        "spec_decoder_s": round(totals["spec"], 3),
        "decoder_speedup": round(totals["plain"] / totals["spec"], 3),
        "loop_speedup": round(totals["plain"] / totals["loop"], 3),
        "drafting_speedup": round(totals["loop"] / totals["spec"], 3),
        "end_to_end_speedup": round(
            (encoder_s + totals["plain"]) / (encoder_s + totals["spec"]), 3
        ),
        "main_forward_passes_plain": passes["plain"],
        "main_forward_passes_loop": passes["loop"],
        "main_forward_passes_spec": passes["spec"],
        "acceptance_rate": round(accepted / drafted, 4) if drafted else 0.0,
        "drafted": drafted,
        "accepted": accepted,
        "per_utterance": rows,
    }
    if args.assistant:
        result["hf_assisted_decoder_s"] = round(totals["hf_assist"], 3)
        result["model_drafter_decoder_s"] = round(totals["model"], 3)
        result["main_forward_passes_model"] = passes["model"]
    print()
    print(f"{'':26s}{'decoder s':>10s}{'passes':>9s}{'vs plain':>10s}")
    for label, key, p in [
        ("plain greedy (generate)", "plain", "plain"),
        ("own loop, no draft", "loop", "loop"),
        ("speculative (hypothesis)", "spec", "spec"),
    ] + (
        [("HF assisted generate", "hf_assist", None), ("speculative (model)", "model", "model")]
        if args.assistant
        else []
    ):
        pp = f"{passes[p]:9d}" if p else f"{'':>9s}"
        print(f"{label:26s}{totals[key]:10.2f}{pp}{totals['plain'] / totals[key]:9.2f}x")
    print(f"encoder (shared)          {encoder_s:10.2f}")
    print(
        f"identical={identical} utterances={len(items)} decodes={decodes} "
        f"acceptance={result['acceptance_rate']:.2f} "
        f"decoder_speedup={result['decoder_speedup']:.2f} "
        f"end_to_end_speedup={result['end_to_end_speedup']:.2f}"
    )
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(result, indent=2))
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
