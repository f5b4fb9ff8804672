"""What a vocabulary prompt does: named words it lists, and WER everywhere else, side by side.

Transcribes the English dev clips (offline path, the bundled model) twice in one run: without a
prompt, and with `--vocabulary` (default: the proper nouns of the references themselves, as an
operator who knows the meeting's names would list them). Prints, for each way:
- term accuracy: of the listed terms' occurrences in the references, how many the transcript
  spells exactly (case-insensitive, punctuation stripped);
- WER on the clips that contain a listed term, and on the clips that contain none (what the
  prompt costs or gains where it has nothing to help with);
- the decoding time ratio (a longer prompt is more tokens to attend to; timings move with load).

The dev set's references hold few names (base spells them already); its errors are domain words
("four of clubs" heard as "4 Queen of Clothes", "milliseconds" as "mil die seconds"), which is
what a vocabulary is for: pass the terms an operator of such meetings would list, e.g.
``--vocabulary "clubs, spades, hearts, diamonds, milliseconds, Patel, Dashwood, roadmap"``.

    .venv/bin/python scripts/eval_vocabulary.py [--vocabulary "Patel, Amsterdam"] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

import jiwer

from streamcap.core.prompting import parse_vocabulary, stream_prompt
from streamcap.evaluation.normalize import Normalizer, make_normalizer
from streamcap.evaluation.paths import EVAL_DEV
from streamcap.runtime.engine import Engine, options_for
from streamcap.runtime.transcribe import TranscribeOptions, Transcription

DEV = EVAL_DEV
_WORD = re.compile(r"[^\w']+")


def proper_nouns(rows: list[dict[str, Any]]) -> list[str]:
    """Capitalised words of the references that never appear in lower case (so not "But" at
    the start of a verse line) and do not start a sentence."""
    lower = {w.strip('.,;:!?"()') for r in rows for w in r["text"].split() if w[:1].islower()}
    found: dict[str, str] = {}
    for r in rows:
        words = r["text"].split()
        for prev, w in zip(words, words[1:], strict=False):
            core = w.strip('.,;:!?"()')
            if not core or not core[0].isupper() or core in ("I", "I'll", "I'm", "I've"):
                continue
            if prev.endswith((".", "?", "!")) or core.lower() in lower:
                continue
            found.setdefault(core.lower(), core)
    return list(found.values())


def tokens(text: str) -> list[str]:
    return [t for t in _WORD.split(text.lower()) if t]


def term_hits(terms: list[str], ref: str, hyp: str) -> tuple[int, int]:
    """(occurrences of the terms in `ref`, of those also in `hyp`), one per occurrence."""
    ref_t, hyp_t = tokens(ref), tokens(hyp)
    total = hit = 0
    for term in terms:
        parts = tokens(term)
        n = len(parts)
        in_ref = sum(ref_t[i : i + n] == parts for i in range(len(ref_t) - n + 1))
        in_hyp = sum(hyp_t[i : i + n] == parts for i in range(len(hyp_t) - n + 1))
        total += in_ref
        hit += min(in_ref, in_hyp)
    return total, hit


def transcribe(engine: Engine, path: Path, prompt: str) -> str:
    opts = TranscribeOptions(
        decoding=options_for(engine, "en", "transcribe"), prompt=prompt, word_timestamps=False
    )
    return " ".join(c.text for c in Transcription(engine, path, opts))


def measure_way(
    engine: Engine,
    rows: list[dict[str, Any]],
    terms: list[str],
    prompt: str,
    norm: Normalizer,
    name: str,
    per_clip: list[dict[str, Any]],
) -> dict[str, Any]:
    """Every clip transcribed with ``prompt``: term accuracy, WER with and without terms, time
    (each clip's transcript appended to ``per_clip``)."""
    refs_with: list[str] = []
    hyps_with: list[str] = []
    refs_without: list[str] = []
    hyps_without: list[str] = []
    total = hit = 0
    t0 = time.perf_counter()
    for r in rows:
        hyp = transcribe(engine, DEV / r["audio"], prompt)
        n, h = term_hits(terms, r["text"], hyp)
        total, hit = total + n, hit + h
        ref_n, hyp_n = norm(r["text"]), norm(hyp) or "<empty>"
        (refs_with if n else refs_without).append(ref_n)
        (hyps_with if n else hyps_without).append(hyp_n)
        per_clip.append({"way": name, "id": r["id"], "hyp": hyp, "terms": n, "hits": h})
    seconds = time.perf_counter() - t0
    return {
        "term_accuracy": hit / total if total else None,
        "term_occurrences": total,
        "wer_clips_with_terms": jiwer.wer(refs_with, hyps_with) if refs_with else None,
        "wer_clips_without_terms": jiwer.wer(refs_without, hyps_without),
        "clips_with_terms": len(refs_with),
        "seconds": seconds,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="base")
    ap.add_argument("--vocabulary", help="terms (default: the references' proper nouns)")
    ap.add_argument("--prompt", default="", help="prompt text before the vocabulary")
    ap.add_argument("--json", help="write the per-clip results here")
    args = ap.parse_args()

    rows = [json.loads(x) for x in (DEV / "manifest.jsonl").read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r.get("lang") == "en" and not r["id"].startswith("lf")]
    terms = list(parse_vocabulary(args.vocabulary)) if args.vocabulary else proper_nouns(rows)
    prompt = stream_prompt(args.prompt, terms)
    norm, _ = make_normalizer()
    engine = Engine(args.model)
    transcribe(engine, DEV / rows[0]["audio"], "")  # warm-up: kernels, allocations
    ways = {"no prompt": "", "vocabulary": prompt}
    out: dict[str, Any] = {"terms": terms, "prompt": prompt, "clips": len(rows), "ways": {}}
    per_clip: list[dict[str, Any]] = []
    for name, text in ways.items():
        out["ways"][name] = measure_way(engine, rows, terms, text, norm, name, per_clip)
    a, b = out["ways"]["no prompt"], out["ways"]["vocabulary"]
    out["time_ratio_vocabulary_over_none"] = b["seconds"] / a["seconds"]
    if args.json:
        Path(args.json).write_text(json.dumps({**out, "per_clip": per_clip}, indent=1))
    print(f"terms ({len(terms)}): {', '.join(terms)}")
    for name, m in out["ways"].items():
        acc = m["term_accuracy"]
        print(
            f"{name:>11}: terms spelt {acc:.1%} of {m['term_occurrences']}  "
            f"WER clips with terms {m['wer_clips_with_terms']:.2%} ({m['clips_with_terms']})  "
            f"without {m['wer_clips_without_terms']:.2%}  ({m['seconds']:.1f} s)"
        )
    print(f"time vocabulary / none: {out['time_ratio_vocabulary_over_none']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
