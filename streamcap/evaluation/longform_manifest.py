"""Cut a long-form file into its reference utterances: a manifest `bench` can run.

    python scripts/longform_manifest.py ../shared/eval-dev/longform/lf3_real_dev.json out/lf3_utts

`bench` (``scripts/bench_decoding.py --manifest``) measures utterances of at most 30 s, one
Whisper window each; the long-form files are references of whole streams. This writes each
reference segment's audio (with `--pad` seconds of the file's own audio either side, clipped at
its neighbours' midpoints so that no words of the next utterance come in) as a WAV and a
`manifest.jsonl` beside them, in the dev manifest's fields (`id`, `audio`, `text`, `lang`,
`kind`). A segment longer than `--max-s` (lf3's 52 s sonnet reading) is left out and counted:
one window cannot hold it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import soundfile as sf

from streamcap.core.constants import SAMPLE_RATE

SR = SAMPLE_RATE


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("reference", type=Path, help="a long-form reference JSON (segments)")
    p.add_argument("out", type=Path, help="folder for the WAVs and manifest.jsonl")
    p.add_argument("--pad", type=float, default=0.3, help="seconds of context either side")
    p.add_argument("--max-s", type=float, default=29.0, help="longest utterance kept")
    p.add_argument("--kind", default="real", help="the manifest's kind for every utterance")
    args = p.parse_args(argv)

    ref = json.loads(args.reference.read_text())
    audio_path = args.reference.parent.parent / ref["audio"]
    if not audio_path.is_file():
        audio_path = args.reference.with_suffix(".wav")
    audio, rate = sf.read(audio_path, dtype="float32")
    if rate != SR:
        raise SystemExit(f"{audio_path}: {rate} Hz, expected {SR}")
    segs = ref["segments"]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.reference.stem
    lines, skipped = [], 0
    for i, s in enumerate(segs):
        lo_bound = (segs[i - 1]["end"] + s["start"]) / 2 if i else 0.0
        hi_bound = (s["end"] + segs[i + 1]["start"]) / 2 if i + 1 < len(segs) else len(audio) / SR
        a = max(lo_bound, s["start"] - args.pad)
        b = min(hi_bound, s["end"] + args.pad)
        if b - a > args.max_s:
            skipped += 1
            continue
        name = f"{stem}_{i:03d}"
        sf.write(args.out / f"{name}.wav", audio[round(a * SR) : round(b * SR)], SR)
        item = {
            "id": name,
            "audio": f"{name}.wav",
            "text": s["text"],
            "lang": s.get("lang", "en"),
            "kind": args.kind,
            "duration": round(b - a, 3),
        }
        lines.append(json.dumps(item))
    (args.out / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    where = args.out / "manifest.jsonl"
    print(f"{len(lines)} utterances in {where}; {skipped} over {args.max_s} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
