"""Does a lossy copy of a recording pause where the recording does? (issue 23: jfk.mp4)

    python scripts/codec_agreement.py [--aac-kbps 128] [FILES...]
    python scripts/codec_agreement.py --captions [--set NAME=VALUE] [FILES...]

The live policy closes a window as soon as the segmenter holds audio back (a pause longer
than its 210 ms tail): a pause found in one copy and not in the other is a final split in one
and not the other. For each file (default: every WAV of ../shared/eval-dev) this encodes an
AAC copy in an MP4 as a phone or camera would (FFmpeg's encoder through PyAV, 44.1 kHz
stereo), decodes it with streamcap's own reader, runs the segmenter over both in 30 ms pushes,
and lists the moments where each starts holding audio back. Pauses of the two copies within
`--tolerance` seconds match; the rest are disagreements. Prints the count per file that
differs and the total.

`--captions` compares what a viewer reads instead: each file and its AAC copy go through the
live pipeline (the bundled model, simulated clock charging the worker thread's CPU time, as
scripts/eval_stream.py) and their finals' texts are compared, with the original replayed a
second time as the yardstick of what timing alone changes (a partial's moment moves a
commit). A dev clip is decoded in its manifest's language, other files detect theirs.
`--set` overrides a policy or segmenter field (eval_stream's syntax).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import av
import numpy as np
import soundfile as sf

from streamcap.audio.file import load_audio
from streamcap.audio.resample import resample
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.segmenter import Segmenter, SpeechAudio, segment_audio
from streamcap.evaluation.paths import EVAL_DEV

EVAL = EVAL_DEV
PUSH = 480  # 30 ms, as a live source delivers

Pair = tuple[Path, np.ndarray, np.ndarray]  # a file, its audio, its AAC copy's


def aac_copy(audio: np.ndarray, path: Path, kbps: int) -> Path:
    """``audio`` (16 kHz mono) as AAC in an MP4 at 44.1 kHz stereo."""
    rate = 44100
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream("aac", rate=rate)
        stream.layout = "stereo"
        stream.bit_rate = kbps * 1000
        x = resample(audio, SAMPLE_RATE, rate)
        pcm = np.round(np.repeat(x[:, None], 2, axis=1) * 32767).astype(np.int16)
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="stereo")
        frame.sample_rate, frame.pts = rate, 0
        conv = av.AudioResampler(format=stream.codec_context.format.name, layout="stereo",
                                 rate=rate)  # fmt: skip
        for f in conv.resample(frame) + conv.resample(None):
            out.mux(stream.encode(f))
        out.mux(stream.encode(None))
    return path


def pause_onsets(audio: np.ndarray) -> list[float]:
    """Stream seconds at which the segmenter starts holding audio back inside an utterance
    (what the live policy reads as a pause), from its events alone."""
    seg = Segmenter()
    delivered = 0.0
    holding = False
    onsets: list[float] = []
    for i in range(0, len(audio), PUSH):
        for ev in seg.push(audio[i : i + PUSH]):
            if isinstance(ev, SpeechAudio):
                delivered = ev.end
        held = seg.in_speech and seg.time - delivered > 0.5 * PUSH / SAMPLE_RATE
        if held and not holding:
            onsets.append(delivered)
        holding = held
    return onsets


def unmatched(a: list[float], b: list[float], tolerance: float) -> int:
    rest = list(b)
    missing = 0
    for x in a:
        k = next((i for i, y in enumerate(rest) if abs(x - y) <= tolerance), None)
        if k is None:
            missing += 1
        else:
            rest.pop(k)
    return missing + len(rest)


def caption_runner(settings: list[str]) -> Callable[[np.ndarray, str], list[str]]:
    """The live pipeline over one recording in a language (a code, or auto): its finals."""
    from streamcap.evaluation.live_run import run_stream, warm_up
    from streamcap.evaluation.settings import build_config
    from streamcap.runtime.engine import Engine

    engine = Engine("base")
    warmed = False

    def finals(audio: np.ndarray, language: str) -> list[str]:
        nonlocal warmed
        config = build_config(language, settings)
        if not warmed:
            warm_up(engine, audio, config.language)
            warmed = True
        run = run_stream(engine, audio, config, "simulated", 0.1, "thread")
        return [cap.text for _, cap in run["events"] if cap.type == "final"]

    return finals


def languages() -> dict[str, str]:
    """Each dev clip's language (the manifest's); other files are left to detection."""
    rows = (json.loads(line) for line in (EVAL / "manifest.jsonl").read_text().splitlines())
    return {Path(r["audio"]).stem: r["lang"] for r in rows}


def pairs(files: list[Path], tmp: Path, kbps: int) -> Iterator[Pair]:
    """Each file (16 kHz mono) with its AAC copy as streamcap's reader decodes it."""
    for f in files:
        audio, rate = sf.read(f, dtype="float32")
        if audio.ndim > 1:
            audio = audio.mean(axis=1)
        if rate != SAMPLE_RATE:
            audio = resample(audio, rate, SAMPLE_RATE)
        yield f, audio, load_audio(aac_copy(audio, tmp / f"{f.stem}.mp4", kbps))


def compare_captions(
    files: Iterable[Pair], finals_of: Callable[[np.ndarray, str], list[str]]
) -> None:
    """The live finals of each file, its AAC copy and the file again; prints those that
    differ and the counts."""
    lang = languages()
    count = differ = finals = rerun_differ = 0
    for f, audio, copy in files:
        count += 1
        code = lang.get(f.stem, "auto")
        a, b, again = (finals_of(x, code) for x in (audio, copy, audio))
        finals += len(a)
        rerun_differ += again != a
        if a != b:
            differ += 1
            print(f"{f.stem}:\n  original {a}\n  AAC copy {b}", flush=True)
    print(
        f"{count} files, {finals} finals in the originals; the AAC copy's finals differ"
        f" in {differ} files; the original replayed again differs in {rerun_differ}"
    )


def compare_pauses(files: Iterable[Pair], tolerance: float) -> None:
    """The segmenter's pause onsets and utterance ends of each file against its AAC copy's;
    prints the files that differ and the counts."""
    count = total = differ = pauses = 0
    ends = ends_unmatched = ends_differ = 0
    for f, audio, copy in files:
        count += 1
        a, b = pause_onsets(audio), pause_onsets(copy)
        n = unmatched(a, b, tolerance)
        total += n
        pauses += len(a)
        if n:
            differ += 1
            only_a = [round(x, 2) for x in a if all(abs(x - y) > tolerance for y in b)]
            only_b = [round(y, 2) for y in b if all(abs(x - y) > tolerance for x in a)]
            print(f"{f.stem}: only in the original {only_a}, only in the AAC copy {only_b}")
        # utterance ends: where `streamcap transcribe` (one decode per utterance) splits
        ua = [u.end for u in segment_audio(audio)][:-1]
        ub = [u.end for u in segment_audio(copy)][:-1]
        m = unmatched(ua, ub, tolerance)
        ends += len(ua)
        ends_unmatched += m
        ends_differ += m > 0
        if m:
            xa, xb = [round(x, 2) for x in ua], [round(y, 2) for y in ub]
            print(f"{f.stem}: utterance ends {xa} vs {xb}")
    share = total / max(pauses, 1)
    print(f"{count} files, {pauses} pauses in the originals; {total} unmatched ({share:.1%}),"
          f" {differ} files differ")  # fmt: skip
    print(f"utterances cut between: {ends} in the originals; {ends_unmatched} unmatched,"
          f" {ends_differ} files differ")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("files", nargs="*", type=Path)
    p.add_argument("--aac-kbps", type=int, default=128)
    p.add_argument("--tolerance", type=float, default=0.1, help="seconds")
    p.add_argument("--captions", action="store_true", help="compare the live finals' texts")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = p.parse_args(argv)
    files = args.files or sorted((EVAL / "wav").glob("*.wav")) + sorted(
        (EVAL / "longform").glob("*.wav")
    )
    finals_of = caption_runner(args.set) if args.captions else None
    with tempfile.TemporaryDirectory() as tmp:
        both = pairs(files, Path(tmp), args.aac_kbps)
        if finals_of is not None:
            compare_captions(both, finals_of)
        else:
            compare_pauses(both, args.tolerance)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
