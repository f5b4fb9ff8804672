"""Batched decoder steps and encoder calls vs batch 1, on real speech (bundled ``base``).

Per batch size B: one batched decoder step (1 token, and an 8-token verify, per row) against
B batch-1 steps; ``BatchedDecoder.decode_batch`` of B different clips (drafting from the
hypothesis of the window one second shorter, as live partials do) against B batch-1
``SpeculativeDecoder.decode`` calls; the encoder at batch B (30 s and a ~10 s context) against
B single calls; the largest batched-vs-batch-1 logit seen (a probe run), the margin rechecks per
token, and whether every row's tokens equal batch 1's. ``--finals`` also encodes every dev clip
in batches and checks that batch-1 decodes of those encoder outputs give the same tokens.

    .venv/bin/python scripts/bench_batching.py --threads 2 --finals
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import soundfile as sf
import torch

from streamcap.core.decode_types import DecodingOptions
from streamcap.decoding.batched import MARGIN, BatchedDecoder
from streamcap.decoding.batched_encode import encode_windows
from streamcap.decoding.batched_lean import Segment, forward_packed, project
from streamcap.decoding.drafters import Drafter, HypothesisDrafter, NoDrafter
from streamcap.evaluation.paths import EVAL_DEV, TEST_DATA
from streamcap.runtime.engine import Encoded, Engine

DEV = EVAL_DEV


def load_clips(manifest: Path, kinds: tuple[str, ...], max_s: float = 30.0) -> list[dict[str, Any]]:
    clips = []
    for line in manifest.read_text().splitlines():
        item = json.loads(line)
        if item["kind"] not in kinds:
            continue
        audio, rate = sf.read(manifest.parent / item["audio"], dtype="float32")
        if rate != 16000 or len(audio) > max_s * rate:
            continue
        item["samples"] = audio
        clips.append(item)
    return clips


def best(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


@torch.inference_mode()
def step_costs(
    engine: Engine, encs: list[torch.Tensor], b: int, n: int, repeats: int
) -> tuple[float, float]:
    """(batched step, B batch-1 steps) seconds: ``n`` new tokens per row over ~24 cached."""
    step = engine.decoder.step
    lean = step.lean
    assert lean is not None
    tokens = [50258, 50259, 50359, 50363] + [400 + i for i in range(40)]
    caches = []
    for i in range(b):
        cache = lean.new_cache()
        lean.forward(tokens[:24], cache, encs[i % len(encs)])
        caches.append(cache)
    new = tokens[24 : 24 + n]

    def batched() -> None:
        segs = [Segment(new, c, encs[i % len(encs)]) for i, c in enumerate(caches)]
        hidden = forward_packed(lean, segs)
        project(step, torch.cat(hidden))
        for c in caches:
            c.crop(24)

    def single() -> None:
        for i, c in enumerate(caches):
            step.logits(lean.forward(new, c, encs[i % len(encs)]))
            c.crop(24)

    batched()
    single()
    return best(batched, repeats), best(single, repeats)


@dataclass
class Inputs:
    """The clips of a run, encoded at 30 s, with live-style drafts: the hypothesis of the same
    clip one second shorter."""

    engine: Engine
    opts: DecodingOptions
    clips: list[dict[str, Any]]
    encoded: list[Encoded]
    hyps: list[tuple[int, ...]]

    @property
    def encs(self) -> list[torch.Tensor]:
        return [e.enc for e in self.encoded]

    def drafters(self, b: int) -> list[Drafter]:
        return [HypothesisDrafter(self.hyps[i], eot=self.engine.spec.eot) for i in range(b)]


def prepare(engine: Engine, opts: DecodingOptions, n: int) -> Inputs:
    """``n`` clips: the test clips first, then the dev set's real English ones."""
    clips = load_clips(TEST_DATA / "manifest.jsonl", ("real", "tts"))
    if (DEV / "manifest.jsonl").exists():
        seen = {c["id"] for c in clips}
        clips += [
            c
            for c in load_clips(DEV / "manifest.jsonl", ("real",))
            if c["id"] not in seen and c["lang"] == "en"
        ]
    clips = clips[:n]
    print(f"{len(clips)} clips: " + ", ".join(f"{c['id']} ({c['duration']:.1f}s)" for c in clips))
    encoded = [engine.encode(c["samples"]) for c in clips]
    hyps: list[tuple[int, ...]] = []
    for c in clips:
        shorter = c["samples"][: max(16000, len(c["samples"]) - 16000)]
        hyps.append(engine.decode(engine.encode(shorter), opts, drafter="none").tokens)
    return Inputs(engine, opts, clips, encoded, hyps)


def decode_timings(
    inp: Inputs, batcher: BatchedDecoder, b: int, refs: list[Any], repeats: int
) -> tuple[dict[str, float], bool, int, int]:
    """`decode_batch` of ``b`` clips against ``b`` batch-1 decodes, with hypothesis drafts and
    without: the timings, whether every row's tokens are ``refs``, the margin rechecks and the
    tokens chosen."""
    dec, opts = inp.engine.decoder, inp.opts
    e_b, d_b = inp.encoded[:b], [e.duration_s for e in inp.encoded[:b]]
    row: dict[str, float] = {}
    identical = True
    rechecks = tokens = 0
    for kind in ("hyp", "none"):
        times_b, times_s = [], []
        for _ in range(repeats):
            ds = inp.drafters(b) if kind == "hyp" else [NoDrafter() for _ in range(b)]
            t0 = time.perf_counter()
            single = [
                dec.decode(e.enc, opts, d, e.duration_s) for e, d in zip(e_b, ds, strict=True)
            ]
            t1 = time.perf_counter()
            ds = inp.drafters(b) if kind == "hyp" else [NoDrafter() for _ in range(b)]
            out = batcher.decode_batch_counted(inp.encs[:b], [opts] * b, ds, d_b)
            times_b.append(time.perf_counter() - t1)
            times_s.append(t1 - t0)
            identical &= all(o.result.tokens == r for o, r in zip(out, refs, strict=True))
            identical &= all(s.tokens == r for s, r in zip(single, refs, strict=True))
            rechecks += sum(o.counters.rechecked for o in out)
            tokens += sum(o.counters.choices for o in out)
        row.update(
            {
                f"{kind}_s": min(times_b),
                f"{kind}_seq_s": min(times_s),
                f"{kind}_x": min(times_s) / min(times_b),
            }
        )
    return row, identical, rechecks, tokens


def measure(
    inp: Inputs, batcher: BatchedDecoder, probe: BatchedDecoder, b: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Every figure at batch size ``b`` (see the module docstring)."""
    row: dict[str, Any] = {"B": b}
    s1b, s1s = step_costs(inp.engine, inp.encs, b, 1, args.step_repeats)
    s8b, s8s = step_costs(inp.engine, inp.encs, b, 8, args.step_repeats)
    row.update(step1_ms=1e3 * s1b, step1_x=s1s / s1b, verify8_ms=1e3 * s8b, verify8_x=s8s / s8b)
    dec, opts = inp.engine.decoder, inp.opts
    d_b = [e.duration_s for e in inp.encoded[:b]]
    refs = [dec.decode(e.enc, opts, NoDrafter(), e.duration_s).tokens for e in inp.encoded[:b]]
    timings, identical, rechecks, tokens = decode_timings(inp, batcher, b, refs, args.repeats)
    row.update(timings)
    probed = probe.decode_batch_counted(inp.encs[:b], [opts] * b, inp.drafters(b), d_b)
    probed += probe.decode_batch_counted(inp.encs[:b], [opts] * b, [None] * b, d_b)
    identical &= all(o.result.tokens == refs[i % b] for i, o in enumerate(probed))
    diff = max(o.counters.max_logit_diff for o in probed)
    row.update(max_diff=diff, rechecks_per_token=rechecks / max(1, tokens), identical=identical)
    engine = inp.engine
    for name, ctx in (("enc30", None), ("enc10", args.context_s)):
        windows: list[tuple[Any, float | None]] = [(c["samples"], ctx) for c in inp.clips[:b]]

        def batched(w: list[tuple[Any, float | None]] = windows) -> object:
            return encode_windows(engine.frontend, w)

        def single(w: list[tuple[Any, float | None]] = windows) -> object:
            return [engine.encode(a, context_s=x) for a, x in w]

        tb, ts = best(batched, args.repeats), best(single, args.repeats)
        row.update({f"{name}_s": tb, f"{name}_x": ts / tb})
    return row


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,2,3,4,6,8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per measurement (min)")
    ap.add_argument("--step-repeats", type=int, default=7)
    ap.add_argument("--context-s", type=float, default=10.0, help="shortened encoder context")
    ap.add_argument("--finals", action="store_true", help="batched-encoder finals check")
    ap.add_argument("--finals-batch", default="4", help="batch sizes for the finals check")
    ap.add_argument(
        "--dev-probe", type=int, default=0, metavar="B", help="probe every dev clip, B rows a batch"
    )
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto (gpu_check.sh: cuda)")
    ap.add_argument("--precision", default="auto", help="auto, fp32, bf16 or fp16")
    ap.add_argument("--json", type=Path)
    return ap


def main() -> int:
    args = parser().parse_args()
    torch.set_num_threads(args.threads)
    sizes = [int(s) for s in args.sizes.split(",")]
    engine = Engine("base", device=args.device, precision=args.precision)
    inp = prepare(engine, DecodingOptions(language="en"), max(sizes))
    probe = BatchedDecoder(engine.decoder, probe=True)
    batcher = BatchedDecoder(engine.decoder)
    rows = []
    worst = 0.0
    for b in sizes:
        row = measure(inp, batcher, probe, b, args)
        worst = max(worst, row["max_diff"])
        rows.append(row)
        print(json.dumps({k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()}))
    print_table(rows, args.threads, worst)
    report: dict[str, Any] = {"rows": rows, "max_logit_diff": worst, "margin": MARGIN}
    if args.dev_probe:
        report["dev_probe"] = dev_probe(engine, args.dev_probe)
    if args.finals:
        report["finals"] = finals_check(engine, [int(s) for s in args.finals_batch.split(",")])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 0


def print_table(rows: list[dict[str, Any]], threads: int, worst: float) -> None:
    print(
        f"\nbase, fp32, {threads} threads; margin {MARGIN:.2e} = "
        f"{MARGIN / max(worst, 1e-30):.1f}x the largest logit difference seen ({worst:.2e})"
    )
    head = (
        f"{'B':>2} | {'step1 ms':>8} {'x':>5} | {'verify8 ms':>10} {'x':>5} | "
        f"{'hyp s':>5} {'seq':>5} {'x':>5} | {'none s':>6} {'seq':>5} {'x':>5} | "
        f"{'enc30 s':>7} {'x':>5} | {'enc10 s':>7} {'x':>5} | {'max dlogit':>10} "
        f"{'rechk/tok':>9} same"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['B']:>2} | {r['step1_ms']:8.1f} {r['step1_x']:5.2f} | "
            f"{r['verify8_ms']:10.1f} {r['verify8_x']:5.2f} | "
            f"{r['hyp_s']:5.2f} {r['hyp_seq_s']:5.2f} {r['hyp_x']:5.2f} | "
            f"{r['none_s']:6.2f} {r['none_seq_s']:5.2f} {r['none_x']:5.2f} | "
            f"{r['enc30_s']:7.2f} {r['enc30_x']:5.2f} | {r['enc10_s']:7.2f} {r['enc10_x']:5.2f} | "
            f"{r['max_diff']:10.2e} {r['rechecks_per_token']:9.4f} "
            f"{'yes' if r['identical'] else 'NO'}"
        )
    print(
        "x: B batch-1 calls' time / the batched call's time (above 1: batching pays); "
        "hyp/none: decode_batch with live-style hypothesis drafts / no drafts, seq: B batch-1 "
        "decodes"
    )


def dev_clips() -> list[dict[str, Any]]:
    manifest = DEV / "manifest.jsonl"
    if not manifest.exists():
        manifest = TEST_DATA / "manifest.jsonl"
    return load_clips(manifest, ("real", "tts", "real_silence"))


def dev_probe(engine: Engine, b: int) -> dict[str, Any]:
    """The largest batched-vs-batch-1 logit difference over every dev clip (batches of ``b``,
    no drafts and hypothesis drafts of the clip one second shorter)."""
    clips = dev_clips()
    probe = BatchedDecoder(engine.decoder, probe=True)
    worst = 0.0
    rows = choices = rechecked = 0
    same = True
    for g in range(0, len(clips), b):
        group = clips[g : g + b]
        encs = [engine.encode(c["samples"]) for c in group]
        opts = [DecodingOptions(language=c["lang"]) for c in group]
        hyps = []
        for c, o in zip(group, opts, strict=True):
            shorter = c["samples"][: max(16000, len(c["samples"]) - 16000)]
            hyps.append(engine.decode(engine.encode(shorter), o, drafter="none").tokens)
        refs = [
            engine.decoder.decode(e.enc, o, NoDrafter(), e.duration_s).tokens
            for e, o in zip(encs, opts, strict=True)
        ]
        for ds in (
            [None] * len(group),
            [HypothesisDrafter(h, eot=engine.spec.eot) for h in hyps],
        ):
            out = probe.decode_batch_counted(
                [e.enc for e in encs], opts, ds, [e.duration_s for e in encs]
            )
            worst = max([worst] + [o.counters.max_logit_diff for o in out])
            rows += len(out)
            choices += sum(o.counters.choices for o in out)
            rechecked += sum(o.counters.rechecked for o in out)
            same &= all(o.result.tokens == r for o, r in zip(out, refs, strict=True))
    print(
        f"dev probe: {len(clips)} clips x 2 drafters, batches of {b}: largest logit difference "
        f"{worst:.2e} over {choices} choices; {rechecked} rechecked at margin {MARGIN:.2e}; "
        f"tokens identical to batch 1: {'yes' if same else 'NO'}"
    )
    return {
        "clips": len(clips),
        "max_logit_diff": worst,
        "choices": choices,
        "rechecked": rechecked,
        "same": same,
    }


def finals_check(engine: Engine, batch_sizes: list[int]) -> dict[str, Any]:
    """Do batch-1 decodes of batched encoder outputs (full 30 s context) give the tokens of
    batch-1 encoder outputs, on every dev clip?"""
    clips = dev_clips()
    dec = engine.decoder
    single = []
    for c in clips:
        e = engine.encode(c["samples"])
        opts = DecodingOptions(language=c["lang"])
        single.append((e.enc, dec.decode(e.enc, opts, NoDrafter(), e.duration_s).tokens, opts))
    out: dict[str, Any] = {}
    for b in batch_sizes:
        same = differ = 0
        enc_diff = 0.0
        changed: list[str] = []
        for g in range(0, len(clips), b):
            group = clips[g : g + b]
            batched = encode_windows(engine.frontend, [(c["samples"], None) for c in group])
            for c, w, (enc1, toks1, opts) in zip(group, batched, single[g : g + b], strict=True):
                enc_diff = max(enc_diff, float((w.enc - enc1).abs().max()))
                toks = dec.decode(w.enc, opts, NoDrafter(), w.duration_s).tokens
                if toks == toks1:
                    same += 1
                else:
                    differ += 1
                    changed.append(c["id"])
        out[str(b)] = {"same": same, "differ": differ, "changed": changed, "max_enc_diff": enc_diff}
        print(
            f"finals, encoder batch {b}: {same}/{same + differ} clips give identical tokens "
            f"(largest encoder-output difference {enc_diff:.2e}); changed: {changed or 'none'}"
        )
    return out


if __name__ == "__main__":
    raise SystemExit(main())
