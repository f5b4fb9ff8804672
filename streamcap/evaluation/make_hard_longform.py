"""Make a harder real-speech long-form file from lf3: every utterance sped up, short gaps.

Why: recorded speech with natural fast turn-taking (one speaker starts a fraction of a second
after the other stops, people talk faster than IVR prompts) stresses the live policy: the
segmenter has little silence to end an utterance on, finals must come while the next turn is
already being spoken. The dev set has little spontaneous speech, so this file approximates it
from lf3's recorded utterances (lf3 itself mostly pauses 0.6-2 s).

    python scripts/make_hard_longform.py [--tempo 1.3] [--gap 0.1 0.3] [--seed 0] \
        [--babble SNR_DB] [--out-dir out/longform]

Each reference utterance of lf3 is cut with a ~0.05 s margin (never into a neighbour), sped up
``--tempo`` times without changing its pitch (ffmpeg's ``atempo`` through PyAV), and the
utterances are joined with gaps uniform in ``--gap`` seconds (reference end to next reference
start; seeded). Gaps are filled with lf3's own background (pink noise taken from its pauses), so
the noise floor stays continuous. Writes ``lf3_hard.wav`` (16 kHz mono) and ``lf3_hard.json``
(lf3's layout: ``segments`` with the new ``start``/``end`` of each sped-up utterance's speech,
``text`` and ``speaker`` copied). ``--babble SNR_DB`` also writes ``lf3_hard_babble.wav`` (+ json,
same segments): the same audio with babble (several talkers, each a random sequence of the dev
set's synthetic clips, none of which is in lf3) at that SNR against the speech RMS.
Then prints the durations and the project's segmenter's view of the file (how many reference
gaps it still splits at).
"""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import av.filter
import numpy as np
import numpy.typing as npt
import soundfile as sf

from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.segmenter import segment_audio
from streamcap.evaluation.paths import EVAL_DEV

SR = SAMPLE_RATE
DEV = EVAL_DEV
LF3 = DEV / "longform" / "lf3_real_dev"
MARGIN_S = 0.05  # audio kept around each reference utterance (before speed-up)
LEAD_S, TRAIL_S = 0.5, 1.0  # background before the first and after the last utterance
FADE_S = 0.005  # fade at every cut: no clicks
Audio = npt.NDArray[np.float32]


def atempo(x: Audio, tempo: float) -> Audio:
    """``x`` played ``tempo`` times faster at the same pitch (ffmpeg atempo, WSOLA)."""
    graph = av.filter.Graph()
    src = graph.add_abuffer(format="flt", sample_rate=SR, layout="mono", time_base=Fraction(1, SR))
    stages = []
    left = tempo
    while left > 2.0:  # one atempo stage takes 0.5-2 (older ffmpeg); chain for more
        stages.append(2.0)
        left /= 2.0
    while left < 0.5:
        stages.append(0.5)
        left /= 0.5
    stages.append(left)
    node = src
    for t in stages:
        nxt = graph.add("atempo", f"{t:.6f}")
        node.link_to(nxt)
        node = nxt
    sink = graph.add("abuffersink")
    node.link_to(sink)
    graph.configure()
    frame = av.AudioFrame.from_ndarray(
        np.ascontiguousarray(x, dtype=np.float32)[None, :], format="flt", layout="mono"
    )
    frame.sample_rate = SR
    frame.pts = 0
    graph.push(frame)
    graph.push(None)
    out: list[Audio] = []
    while True:
        try:
            out.append(graph.pull().to_ndarray().reshape(-1).astype(np.float32))
        except (av.error.BlockingIOError, av.error.EOFError):
            break
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def _fade(x: Audio) -> Audio:
    n = min(round(FADE_S * SR), len(x) // 2)
    if n:
        ramp = np.linspace(0.0, 1.0, n, dtype=np.float32)
        x = x.copy()
        x[:n] *= ramp
        x[-n:] *= ramp[::-1]
    return x


def background(audio: Audio, segments: list[dict[str, Any]]) -> Audio:
    """The recording's audio more than 0.1 s away from every reference utterance."""
    keep = np.ones(len(audio), dtype=bool)
    for s in segments:
        keep[max(0, round((s["start"] - 0.1) * SR)) : round((s["end"] + 0.1) * SR)] = False
    return audio[keep]


def build(
    audio: Audio,
    segments: list[dict[str, Any]],
    tempo: float = 1.3,
    gap: tuple[float, float] = (0.1, 0.3),
    seed: int = 0,
) -> tuple[Audio, list[dict[str, Any]]]:
    """The sped-up utterances joined with short gaps, and their new reference segments.

    A segment's new ``start``/``end`` are where its speech (its reference span, sped up) lies.
    The gap between two segments is drawn from ``gap``; when the two margins alone exceed it,
    the gap is just the margins (only possible with ``gap[0]`` < 2 * MARGIN_S / tempo).
    """
    rng = np.random.default_rng(seed)
    segs = sorted(segments, key=lambda s: float(s["start"]))
    bed = background(audio, segs)
    if len(bed) < SR // 10:  # no pauses to take the noise floor from: silence
        bed = np.zeros(SR, dtype=np.float32)

    def filler(seconds: float) -> Audio:
        n = max(0, round(seconds * SR))
        reps = n // len(bed) + 2
        tiled = np.tile(bed, reps)
        at = int(rng.integers(0, len(bed)))
        return _fade(tiled[at : at + n])

    pieces: list[Audio] = [filler(LEAD_S)]
    pos = len(pieces[0])
    out_segs: list[dict[str, Any]] = []
    prev_tail = 0.0  # seconds of the previous clip after its speech (sped up)
    for i, s in enumerate(segs):
        start, end = float(s["start"]), float(s["end"])
        before = start - float(segs[i - 1]["end"]) if i else start
        after = float(segs[i + 1]["start"]) - end if i + 1 < len(segs) else len(audio) / SR - end
        head = max(0.0, min(MARGIN_S, before / 2))
        tail = max(0.0, min(MARGIN_S, after / 2))
        a, b = round((start - head) * SR), round((end + tail) * SR)
        clip = _fade(atempo(audio[a:b], tempo))
        if i:
            want = float(rng.uniform(*gap))
            piece = filler(want - prev_tail - head / tempo)
            pieces.append(piece)
            pos += len(piece)
        row = dict(s)
        row["start"] = round((pos + (start * SR - a) / tempo) / SR, 3)
        row["end"] = round((pos + (end * SR - a) / tempo) / SR, 3)
        out_segs.append(row)
        pieces.append(clip)
        pos += len(clip)
        prev_tail = len(clip) / SR - (end * SR - a) / tempo / SR
    pieces.append(filler(TRAIL_S))
    return np.concatenate(pieces).astype(np.float32), out_segs


def babble(n: int, clips: list[Audio], talkers: int, seed: int) -> Audio:
    """``talkers`` voices summed, each a random sequence of ``clips`` (equal RMS each)."""
    rng = np.random.default_rng(seed + 1)
    total = np.zeros(n, dtype=np.float64)
    for _ in range(talkers):
        parts: list[Audio] = []
        length = 0
        while length < n + SR * 10:
            c = clips[int(rng.integers(len(clips)))]
            parts.append(c)
            length += len(c)
        voice = np.concatenate(parts)
        at = int(rng.integers(0, len(voice) - n))
        voice = voice[at : at + n].astype(np.float64)
        total += voice / (np.sqrt(np.mean(voice**2)) + 1e-9)
    return total.astype(np.float32)


def speech_rms(audio: Audio, segments: list[dict[str, Any]]) -> float:
    parts = [audio[round(s["start"] * SR) : round(s["end"] * SR)] for s in segments]
    x = np.concatenate(parts).astype(np.float64)
    return float(np.sqrt(np.mean(x**2)))


def add_babble(audio: Audio, segments: list[dict[str, Any]], snr_db: float, seed: int,
               talkers: int = 6) -> Audio:  # fmt: skip
    """``audio`` with babble from the dev set's synthetic clips at ``snr_db`` over the file."""
    clips: list[Audio] = []
    for line in (DEV / "manifest.jsonl").read_text().splitlines():
        item = json.loads(line)
        if item["kind"] == "tts":  # lf3 holds only the real clips and IVR prompts
            x, rate = sf.read(DEV / item["audio"], dtype="float32")
            assert rate == SR, item["audio"]
            clips.append(x)
    noise = babble(len(audio), clips, talkers, seed)
    noise *= speech_rms(audio, segments) / 10 ** (snr_db / 20) / float(np.sqrt(np.mean(noise**2)))
    mixed = audio + noise
    peak = float(np.max(np.abs(mixed)))
    return (mixed / peak * 0.99 if peak > 0.99 else mixed).astype(np.float32)


def report(name: str, audio: Audio, segments: list[dict[str, Any]]) -> None:
    """Durations, the reference gaps, and how the project's segmenter cuts the file."""
    gaps = np.array([b["start"] - a["end"] for a, b in zip(segments, segments[1:], strict=False)])
    utts = segment_audio(audio)
    # A reference gap is split at when some utterance boundary (end..next start) overlaps it.
    bounds = [(u.end, v.start) for u, v in zip(utts, utts[1:], strict=False)]
    split = sum(
        any(e < b["start"] and s > a["end"] for e, s in bounds)
        for a, b in zip(segments, segments[1:], strict=False)
    )
    lengths = np.array([u.end - u.start for u in utts])
    seg_gaps = np.array([s - e for e, s in bounds])
    print(f"{name}: {len(audio) / SR:.1f} s audio, {len(segments)} reference utterances")
    if len(gaps):
        print(f"  reference gaps: min {gaps.min():.2f} median {np.median(gaps):.2f} "
              f"max {gaps.max():.2f} s")  # fmt: skip
    print(f"  segmenter: {len(utts)} utterances (median {np.median(lengths):.1f} s, "
          f"max {lengths.max():.1f} s); splits at {split}/{len(gaps)} reference gaps"
          + (f"; its gaps min {seg_gaps.min():.2f} median {np.median(seg_gaps):.2f} s"
             if len(seg_gaps) else ""))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--audio", default=str(LF3.with_suffix(".wav")))
    ap.add_argument("--reference", default=str(LF3.with_suffix(".json")))
    ap.add_argument("--tempo", type=float, default=1.3)
    ap.add_argument("--gap", type=float, nargs=2, default=(0.1, 0.3), metavar=("MIN", "MAX"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--babble", type=float, metavar="SNR_DB", help="also write a babble copy")
    ap.add_argument("--talkers", type=int, default=6, help="voices in the babble")
    ap.add_argument("--out-dir", default="out/longform")
    ap.add_argument("--name", default="lf3_hard")
    args = ap.parse_args(argv)

    audio, rate = sf.read(args.audio, dtype="float32")
    if rate != SR or audio.ndim != 1:
        raise SystemExit(f"{args.audio}: need 16 kHz mono")
    ref = json.loads(Path(args.reference).read_text())
    out, segs = build(audio, ref["segments"], args.tempo, tuple(args.gap), args.seed)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "sample_rate": SR,
        "duration": round(len(out) / SR, 3),
        "description": f"{Path(args.audio).name} utterances at tempo {args.tempo} (same pitch), "
        f"gaps uniform {args.gap[0]}-{args.gap[1]} s (seed {args.seed}); "
        "made by scripts/make_hard_longform.py",
        "noise": ref.get("noise", ""),
        "pauses": f"uniform {args.gap[0]}-{args.gap[1]} s",
        "source": Path(args.audio).name,
        "tempo": args.tempo,
        "seed": args.seed,
    }
    outputs = [(args.name, out, meta)]
    if args.babble is not None:
        noisy = add_babble(out, segs, args.babble, args.seed, args.talkers)
        bmeta = {**meta, "noise": f"{meta['noise']}; babble of {args.talkers} synthetic "
                 f"talkers (dev tts clips) at {args.babble} dB SNR"}  # fmt: skip
        outputs.append((f"{args.name}_babble", noisy, bmeta))
    print(f"{Path(args.audio).name}: {len(audio) / SR:.1f} s, "
          f"speech {sum(s['end'] - s['start'] for s in ref['segments']):.1f} s")  # fmt: skip
    for name, x, m in outputs:
        wav = out_dir / f"{name}.wav"
        sf.write(wav, x, SR, subtype="PCM_16")
        doc = {"audio": wav.name, **m, "segments": segs,
               "text": " ".join(s["text"] for s in segs)}  # fmt: skip
        (out_dir / f"{name}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False))
        print(f"wrote {wav} and {wav.with_suffix('.json')}; "
              f"speech {sum(s['end'] - s['start'] for s in segs):.1f} s")  # fmt: skip
        report(name, x, segs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
