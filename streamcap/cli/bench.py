"""Benchmark (``streamcap bench``, ``scripts/bench_decoding.py``): plain greedy vs speculative.

For each utterance the audio is replayed as a live stream: the growing window is decoded every
``--step`` seconds and once more at the end (the final), once with plain greedy ``generate`` and
once with the speculative decoder drafting from its previous hypothesis, in the same run, on the
same encoder output. Every decode is checked token for token. Also reported: our own decoder
loop without any draft (to separate the loop's gain from drafting's), and with ``--assistant``
transformers' assisted ``generate`` and our model drafter. Partial windows are encoded on a
shortened audio context as the live pipeline does (``--full-context`` for the standard 30 s
input everywhere); finals always get the standard input.

``--precision fp32,bf16`` runs the whole benchmark once per precision (exactness is defined at
each: speculative output equals plain greedy ``generate`` of the same model at the same
precision) and ends with a comparison: speed-ups against plain greedy at the same precision
and at the baseline (fp32 where it ran), the WER of the final transcripts against the
manifest's ``text``, and how many transcripts differ from the baseline's.

    python scripts/bench_decoding.py --manifest ../shared/eval-dev/manifest.jsonl \
        --lang en --kind real --step 1.0 --json out/bench.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from streamcap.cli.bench_manifest import MANIFEST_HELP, read_manifest
from streamcap.cli.common import say
from streamcap.cli.model_options import (
    DEFAULT_PRECISION,
    ModelOptions,
    add_model_flags,
    transformers_engine,
)
from streamcap.cli.numbers import Number, off_or_positive, positive_float
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.policy_config import PARTIAL_CONTEXT_MARGIN_S, PARTIAL_CONTEXT_MIN_S
from streamcap.errors import UserError

SR = SAMPLE_RATE


@dataclass(frozen=True)
class BenchCommand:
    """Everything the benchmark is asked, built once from its flags (`from_args`): which
    utterances, how often the growing window is decoded, the encoder context of partial
    windows (``partial_context_margin`` None: the standard 30 s), and each precision's
    model (`model` with each of ``precisions``)."""

    manifest: str
    json_out: str | None = None
    limit: int = 0  # the first N matching utterances (0: all)
    lang: str | None = None
    kind: str | None = None
    step: float = 1.0  # seconds of audio between live decodes (0: the final only)
    max_duration: float = 30.0
    partial_context_margin: float | None = PARTIAL_CONTEXT_MARGIN_S
    partial_context_min: float = PARTIAL_CONTEXT_MIN_S
    model: ModelOptions = field(default_factory=ModelOptions)
    precisions: tuple[str, ...] = (DEFAULT_PRECISION,)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> BenchCommand:
        precisions = tuple(args.precisions)
        return cls(
            manifest=args.manifest,
            json_out=args.json_out,
            limit=args.limit,
            lang=args.lang,
            kind=args.kind,
            step=args.step,
            max_duration=args.max_duration,
            partial_context_margin=args.partial_context_margin,
            partial_context_min=args.partial_context_min,
            model=ModelOptions.from_args(args, precision=precisions[0]),
            precisions=precisions,
        )


def windows(duration: float, step: float) -> list[float]:
    import numpy as np

    ends = list(np.arange(step, duration, step)) if step > 0 else []
    return [*ends, duration]


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    add_bench_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The command's edge: its flags become `BenchCommand`, which is all that goes on."""
    return run_bench(BenchCommand.from_args(args))


def add_bench_arguments(ap: argparse.ArgumentParser) -> None:
    """The benchmark's flags, the model group included (shared with `streamcap bench`)."""
    d = BenchCommand(manifest="")
    ap.epilog = MANIFEST_HELP
    g = ap.add_argument_group("benchmark")
    g.add_argument(
        "--manifest", required=True, metavar="JSONL", help="utterances to run (format below)"
    )
    g.add_argument(
        "--json",
        dest="json_out",
        metavar="FILE",
        help="also write the results here as JSON (default: print only)",
    )
    g.add_argument(
        "--limit",
        type=Number(int, low=0),
        default=d.limit,
        metavar="N",
        help="first N matching utterances (0 = all)",
    )
    g.add_argument("--lang", metavar="CODE", help="only utterances of this language (default: all)")
    g.add_argument("--kind", help="only utterances of this kind, e.g. real or tts (default: all)")
    g.add_argument(
        "--step",
        type=off_or_positive,
        default=d.step,
        metavar="S",
        help="seconds of audio between live decodes of the growing window (0 = final only)",
    )
    g.add_argument(
        "--max-duration",
        type=positive_float,
        default=d.max_duration,
        metavar="S",
        help="skip utterances longer than this",
    )
    g.add_argument(
        "--partial-context-margin",
        type=Number(float, low=0),
        default=d.partial_context_margin,
        metavar="S",
        help="encode partial windows (not the final) with an audio context of their length "
        "plus this margin, as the live pipeline does; all columns share that encoder output",
    )
    g.add_argument(
        "--partial-context-min",
        type=Number(float, low=0),
        default=d.partial_context_min,
        metavar="S",
        help="shortest audio context of a partial window",
    )
    g.add_argument(
        "--full-context",
        dest="partial_context_margin",
        action="store_const",
        const=None,
        help="encode every window on Whisper's standard 30 s input instead",
    )
    add_model_flags(ap, language=False, precisions=True)


def main(argv: list[str] | None = None) -> int:
    """`scripts/bench_decoding.py`: the same benchmark without the `streamcap` command."""
    from streamcap.cli.parser import HelpFormatter

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    add_bench_arguments(ap)
    args = ap.parse_args(argv)
    try:
        return run_bench(BenchCommand.from_args(args))
    except UserError as e:
        ap.exit(1, f"{ap.prog}: error: {e}\n")


def run_bench(cmd: BenchCommand) -> int:
    """Each ``--precision`` in turn (a model load each), then the precisions compared."""
    from streamcap.cli.bench_compare import require_wer
    from streamcap.models.loader import choose_placement

    require_wer()
    items = read_manifest(  # before the model loads
        Path(cmd.manifest),
        lang=cmd.lang,
        kind=cmd.kind,
        max_duration=cmd.max_duration,
        limit=cmd.limit,
    )
    for precision in cmd.precisions:  # a precision this machine cannot run fails before a load
        choose_placement(cmd.model.device, precision)
    runs = []
    for precision in cmd.precisions:
        if len(cmd.precisions) > 1:
            say(f"--- precision {precision}")
        runs.append(_bench_one(cmd, replace(cmd.model, precision=precision), items))
        print()
    from streamcap.cli.bench_compare import compare_ct2, compare_precisions, print_comparison

    compare = compare_precisions(runs, items)
    print_comparison(compare)
    others = compare_ct2(cmd.model.model, runs, items)
    identical = all(r["identical"] for r in runs)
    if cmd.json_out:
        for r in runs:
            r.pop("_decodes", None)
            r.pop("_ct2", None)
        out: dict[str, Any] = runs[0] if len(runs) == 1 else {"runs": runs}
        out["precision_comparison"] = compare
        if others is not None:
            out["ctranslate2_comparison"] = others
        Path(cmd.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(cmd.json_out).write_text(json.dumps(out, indent=2))
    return 0 if identical else 1


def _bench_one(
    cmd: BenchCommand, model: ModelOptions, items: list[dict[str, Any]]
) -> dict[str, Any]:
    """One precision: every utterance replayed live, each decode checked token for token."""
    import torch

    from streamcap.audio.file import load_audio
    from streamcap.core.decode_types import DecodingOptions
    from streamcap.decoding.guard import LoopGuard
    from streamcap.decoding.reference import reference_decode

    base = Path(cmd.manifest).parent
    engine = transformers_engine(model, "bench")
    torch.set_grad_enabled(False)

    warm = load_audio(base / items[0]["audio"])[: 2 * SR]
    for _ in range(2):  # warm up both paths so the first timing is not an outlier
        enc = engine.encode(warm)
        reference_decode(engine.decoder, enc.enc, DecodingOptions(language="en"), enc.duration_s)
        engine.decode(enc, DecodingOptions(language="en"), drafter="none")

    cols = ["plain", "loop", "spec"] + (["hf_assist", "model"] if model.assistant else [])
    totals = {c: 0.0 for c in cols}
    passes = {"plain": 0, "loop": 0, "spec": 0, "model": 0}
    drafted = accepted = decodes = 0
    encoder_s = 0.0
    final_s = 0.0  # each clip's final alone: its 30 s encoder and the speculative decode
    ct2_inputs: list[tuple[Any, list[int], int]] = []  # log-mel, prefix, token budget
    identical = True
    rows = []
    all_decodes: list[list[tuple[int, ...]]] = []  # per utterance, every decode's tokens
    for item in items:
        audio = load_audio(base / item["audio"])
        opts = DecodingOptions(language=item.get("lang") if engine.multilingual else None)
        prev: tuple[int, ...] = ()
        row = {c: 0.0 for c in cols} | {"id": item["id"], "decodes": 0, "identical": True}
        ends = windows(len(audio) / SR, cmd.step)
        item_decodes: list[tuple[int, ...]] = []
        for i, end in enumerate(ends):
            context = None
            if cmd.partial_context_margin is not None and i < len(ends) - 1:
                context = max(cmd.partial_context_min, end + cmd.partial_context_margin)
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
            if model.assistant:
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
            item_decodes.append(tuple(ref))
            if i == len(ends) - 1:
                final_s += enc.encoder_s + spec.stats.decoder_s
                lang_id = engine.spec.language_id(opts.language) if opts.language else None
                prefix = engine.spec.prefix(lang_id, opts)
                guard = LoopGuard(opts.max_tokens_per_second, opts.min_token_budget)
                budget = guard.token_budget(enc.duration_s, 448)
                ct2_inputs.append((enc.features.float().cpu().numpy().copy(), prefix, budget))
        row["text"] = engine.spec.tokenizer.decode(list(prev), skip_special_tokens=True)
        rows.append(row)
        all_decodes.append(item_decodes)
        print(
            f"{item['id'][:28]:28s} n={row['decodes']:3d} plain {row['plain']:6.2f}s "
            f"loop {row['loop']:6.2f}s spec {row['spec']:6.2f}s  x{row['plain'] / row['spec']:4.2f}"
            f"{'' if row['identical'] else '  MISMATCH'}",
            flush=True,
        )
    result = {
        "model": model.model,
        "assistant": model.assistant,
        "device": engine.placement.device,
        "precision": engine.precision,
        "step": cmd.step,
        "partial_context_margin": cmd.partial_context_margin,
        "identical": identical,
        "utterances": len(items),
        "decodes": decodes,
        "encoder_s": round(encoder_s, 3),
        "final_s": round(final_s, 3),
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
        "_decodes": all_decodes,  # for the precision comparison; not written to --json
        "_ct2": (ct2_inputs, engine.spec.tokenizer, engine.spec.eot),  # nor this
    }
    if model.assistant:
        result["hf_assisted_decoder_s"] = round(totals["hf_assist"], 3)
        result["model_drafter_decoder_s"] = round(totals["model"], 3)
        result["main_forward_passes_model"] = passes["model"]
    print()
    print(f"precision {engine.precision} on {engine.placement.device}")
    print(f"{'':26s}{'decoder s':>10s}{'passes':>9s}{'vs plain':>10s}")
    for label, key, p in [
        ("plain greedy (generate)", "plain", "plain"),
        ("own loop, no draft", "loop", "loop"),
        ("speculative (hypothesis)", "spec", "spec"),
    ] + (
        [("HF assisted generate", "hf_assist", None), ("speculative (model)", "model", "model")]
        if model.assistant
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
    del engine  # the next precision loads its own copy
    return result


if __name__ == "__main__":
    raise SystemExit(main())
