"""The benchmark's comparisons (`streamcap bench`): precisions side by side, and streamcap's
finals against CTranslate2 (`bench_ct2`), with the WER of the final transcripts."""

from __future__ import annotations

import json
from typing import Any


def compare_precisions(
    runs: list[dict[str, Any]], items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per precision: exactness, speed-ups against plain greedy at the same precision
    and against the baseline's (fp32 if it ran, else the first) plain greedy, the WER of the
    final transcripts against the manifest's ``text``, and how many transcripts differ from
    the baseline's."""
    baseline = next((r for r in runs if r["precision"] == "fp32"), runs[0])
    b_plain = baseline["plain_decoder_s"]
    b_e2e = baseline["encoder_s"] + b_plain
    rows = []
    for r in runs:
        texts = [u["text"] for u in r["per_utterance"]]
        b_texts = [u["text"] for u in baseline["per_utterance"]]
        decodes_differ = sum(
            a != b
            for mine, theirs in zip(r["_decodes"], baseline["_decodes"], strict=True)
            for a, b in zip(mine, theirs, strict=True)
        )
        e2e = r["encoder_s"] + r["spec_decoder_s"]
        rows.append(
            {
                "precision": r["precision"],
                "baseline": baseline["precision"],
                "identical": r["identical"],
                "encoder_s": r["encoder_s"],
                "decoder_speedup": r["decoder_speedup"],
                "end_to_end_speedup": r["end_to_end_speedup"],
                "decoder_speedup_vs_baseline_plain": round(b_plain / r["spec_decoder_s"], 3),
                "end_to_end_speedup_vs_baseline_plain": round(b_e2e / e2e, 3),
                "wer": corpus_wer(items, texts),
                "transcripts_differ": sum(a != b for a, b in zip(texts, b_texts, strict=True)),
                "decodes_differ": decodes_differ,
                "utterances": r["utterances"],
                "decodes": r["decodes"],
            }
        )
    return rows


def print_comparison(rows: list[dict[str, Any]]) -> None:
    base = rows[0]["baseline"]
    header = ["precision", "identical", "enc s", "dec x", "e2e x", "dec x vs base",
              "e2e x vs base", "WER %", "differ from base"]  # fmt: skip
    cells = [
        [r["precision"], str(r["identical"]), f"{r['encoder_s']:.2f}",
         f"{r['decoder_speedup']:.2f}x", f"{r['end_to_end_speedup']:.2f}x",
         f"{r['decoder_speedup_vs_baseline_plain']:.2f}x",
         f"{r['end_to_end_speedup_vs_baseline_plain']:.2f}x", _wer(r["wer"]),
         f"{r['transcripts_differ']}/{r['utterances']} clips, "
         f"{r['decodes_differ']}/{r['decodes']} decodes"]
        for r in rows
    ]  # fmt: skip
    print(format_table(header, cells))
    print(
        "dec x / e2e x: speculative vs plain greedy generate at the same precision (decoder "
        f"time / encoder + decoder time); vs base: against the plain greedy of {base}. "
        "WER: final transcripts vs the manifest's text, Whisper's normaliser"
    )


def format_table(header: list[str], rows: list[list[str]]) -> str:
    """A plain-text table: each column as wide as its widest cell, two spaces between columns,
    the first left-aligned and the rest right-aligned. Widths come from the cells, so a long
    precision name (``bf16-encoder+fp32-decoder``) in a header cannot run into its neighbour;
    plain text, so a pipe or a narrow terminal gets whole lines, not wrapped cells."""
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in table
    )


def _wer(wer: float | None) -> str:
    return "-" if wer is None else f"{100 * wer:.2f}"


def compare_ct2(
    model: str, runs: list[dict[str, Any]], items: list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """Each clip's final in streamcap (each precision) against CTranslate2 int8 and fp32 on
    the same log-mel features and threads (`bench_ct2`; `model`: the --model): seconds, ratio
    and WER."""
    import torch

    from streamcap.cli.bench_ct2 import run_ct2

    inputs, tokenizer, eot = runs[0]["_ct2"]
    res = run_ct2(
        model,
        inputs,
        torch.get_num_threads(),
        lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
        eot,
    )
    if res is None:
        print("(CTranslate2 columns skipped: ctranslate2 not installed, or not a bundled model)")
        return None
    rows = [
        {"engine": f"streamcap {r['precision']}", "final_s": r["final_s"],
         "wer": corpus_wer(items, [u["text"] for u in r["per_utterance"]])}
        for r in runs
    ] + [
        {"engine": o["engine"], "final_s": round(o["final_s"], 3),
         "wer": corpus_wer(items, o["texts"])}
        for o in res
    ]  # fmt: skip
    best = min(r["final_s"] for r in rows[: len(runs)])
    print()
    print(f"each clip's final (encoder + greedy decode), {torch.get_num_threads()} threads")
    for r in rows:
        r["ratio_to_streamcap_best"] = round(r["final_s"] / best, 3)
    cells = [
        [r["engine"], f"{r['final_s']:.2f}", f"{r['ratio_to_streamcap_best']:.2f}x", _wer(r["wer"])]
        for r in rows
    ]
    print(format_table(["engine", "final s", "vs streamcap best", "WER %"], cells))
    print("vs streamcap best: that engine's seconds / the fastest streamcap precision's")
    return rows


def require_wer() -> None:
    """UserError, before any model loads, when jiwer (the `bench` extra) is missing: the WER
    columns are half of what the benchmark reports."""
    from streamcap.errors import UserError

    try:
        import jiwer  # noqa: F401
    except ImportError:
        raise UserError(
            "the jiwer package is needed for the WER columns: pip install 'streamcap[bench]'"
        ) from None


def corpus_wer(items: list[dict[str, Any]], texts: list[str]) -> float | None:
    """Corpus WER of ``texts`` against the items' ``text`` (items without one are skipped),
    after Whisper's English normaliser (its basic one for other languages)."""
    import jiwer

    refs, hyps = [], []
    for item, text in zip(items, texts, strict=True):
        norm = _normalizer(item.get("lang"))
        ref = norm(str(item.get("text") or "")).strip()
        if ref:
            refs.append(ref)
            hyps.append(norm(text).strip() or "<empty>")
    return round(float(jiwer.wer(refs, hyps)), 4) if refs else None


def _normalizer(lang: str | None) -> Any:
    """Whisper's English normaliser (with its spelling map where one is installed), else the
    basic one (the same choice as scripts/eval_stream.py)."""
    import importlib.resources

    from transformers.models.whisper.english_normalizer import (
        BasicTextNormalizer,
        EnglishTextNormalizer,
    )

    if lang not in (None, "en"):
        return BasicTextNormalizer()
    for pkg in ("whisper_normalizer", "whisper"):
        try:
            path = importlib.resources.files(pkg) / "normalizers" / "english.json"
            return EnglishTextNormalizer(json.loads(path.read_text(encoding="utf-8")))
        except (ModuleNotFoundError, FileNotFoundError, OSError):
            continue
    return EnglishTextNormalizer({})
