"""Two-person conversations from the dev set's recorded voices, for speaker labels (issue 37).

    python -m streamcap.evaluation.make_two_speakers --out-dir out/two [--seed 0]

Why: the dev set's long files hold one dominant voice (lf3, lf6: the IVR prompts) or four
synthetic ones (lf2); meetings are often two people taking turns, quickly. Both files below are
made of lf3's and lf6's own recorded utterances, cut at their reference spans with
`make_hard_longform.MARGIN_S` around them, so they share lf3's background (pink noise; the gaps
are filled with lf3's pauses): no voice is told apart by its channel.

- ``two_turns``: the LibriVox reader of lf3 (5 utterances, 3-7 s) and the IVR voice (5 of its
  longer prompts), taking turns, 0.5-1.5 s between them (40 s);
- ``quick_turns``: the cards speaker (5 utterances, 1.1-3.5 s) and the IVR voice's short
  replies from lf6 (1-3 words), alternating with 0.15-0.35 s between them (like "yes" / "no"
  answers; 25 s).

Writes NAME.wav (16 kHz mono) and NAME.json (lf3's layout: ``segments`` with ``start``,
``end``, ``text``, ``speaker``) per file, and prints each file's turns and length.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from streamcap.audio.file import load_audio
from streamcap.core.constants import SAMPLE_RATE
from streamcap.evaluation.make_hard_longform import MARGIN_S, Audio, _fade, background
from streamcap.evaluation.paths import LONGFORM

SR = SAMPLE_RATE
IVR = "allison_asterisk"
#: file -> (first voice, its source file, second voice, its source, turns each, gap range,
#: the second voice's utterances: "long" prompts (>= 3 s) or "short" replies)
FILES: dict[str, tuple[str, str, str, str, int, tuple[float, float], str]] = {
    "two_turns": ("librivox_s&s_reader", "lf3_real_dev", IVR, "lf3_real_dev", 5, (0.5, 1.5),
                  "long"),
    "quick_turns": ("cards_speaker", "lf3_real_dev", IVR, "lf6_short_dev", 5, (0.15, 0.35),
                    "short"),
}  # fmt: skip


def utterances(name: str, speaker: str, kind: str = "") -> list[tuple[Audio, dict[str, Any]]]:
    """``speaker``'s utterances in long file ``name`` (audio with `MARGIN_S` each side, and
    its reference segment), in file order; ``kind`` "long" keeps those of 3 s or more,
    "short" lf6's short replies."""
    ref = json.loads((LONGFORM / f"{name}.json").read_text())
    audio = load_audio(str(LONGFORM / f"{name}.wav"))
    out = []
    for s in ref["segments"]:
        if s["speaker"] != speaker:
            continue
        if kind == "long" and s["end"] - s["start"] < 3.0:
            continue
        if kind == "short" and not s.get("short"):
            continue
        a = round((s["start"] - MARGIN_S) * SR)
        b = round((s["end"] + MARGIN_S) * SR)
        out.append((_fade(audio[a:b]), s))
    return out


def fill(noise: Audio, seconds: float, rng: np.random.Generator) -> Audio:
    """``seconds`` of lf3's background from a random place."""
    n = round(seconds * SR)
    a = int(rng.integers(0, len(noise) - n))
    return _fade(noise[a : a + n])


def build(name: str, seed: int = 0) -> tuple[Audio, list[dict[str, Any]]]:
    """One file of `FILES`: the two voices' utterances alternating, the first voice first."""
    one, src1, two, src2, turns, gap, kind = FILES[name]
    rng = np.random.default_rng(seed)
    lf3 = json.loads((LONGFORM / "lf3_real_dev.json").read_text())
    noise = background(load_audio(str(LONGFORM / "lf3_real_dev.wav")), lf3["segments"])
    first = utterances(src1, one)[:turns]
    second = utterances(src2, two, kind)
    picks = rng.choice(len(second), size=turns, replace=False)
    order = [u for pair in zip(first, [second[int(i)] for i in picks], strict=True) for u in pair]
    parts: list[Audio] = [fill(noise, 0.5, rng)]
    t = 0.5
    segments = []
    for k, (clip, seg) in enumerate(order):
        if k:
            pause = float(rng.uniform(*gap)) - 2 * MARGIN_S
            parts.append(fill(noise, max(pause, 0.02), rng))
            t += max(pause, 0.02)
        speech = seg["end"] - seg["start"]
        segments.append({"start": round(t + MARGIN_S, 3), "end": round(t + MARGIN_S + speech, 3),
                         "text": seg["text"], "speaker": seg["speaker"]})  # fmt: skip
        parts.append(clip)
        t += len(clip) / SR
    parts.append(fill(noise, 1.0, rng))
    return np.concatenate(parts).astype(np.float32), segments


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        audio, segments = build(name, args.seed)
        sf.write(args.out_dir / f"{name}.wav", audio, SR, subtype="PCM_16")
        doc = {"audio": f"{name}.wav", "sample_rate": SR, "duration": round(len(audio) / SR, 3),
               "description": __doc__.split("\n\n")[2].strip(), "segments": segments}  # fmt: skip
        (args.out_dir / f"{name}.json").write_text(json.dumps(doc, indent=1))
        who = " ".join(s["speaker"][:6] for s in segments)
        print(f"{name}: {len(audio) / SR:.1f} s, {len(segments)} turns: {who}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
