"""Choose the speaker labeller's similarity thresholds from clips, not from a meeting's DER.

    python scripts/calibrate_speakers.py --json OUT.json [--exclude lf3] [--exclude lf2] ...
        [--model ge2e|campplus]

The labeller (`core.speakers.SpeakerTracker`) compares a final's embedding with each known
speaker's centroid: at least the threshold, that speaker; below it, a new one. That is a
verification decision, so the thresholds are set where a verification test balances its two
errors, measured on trials of known voices:

- items: every speech clip of ../shared/eval-dev/manifest.jsonl (recorded and synthetic) and
  every reference utterance of the long files (lf2, lf3, lf6), each with its voice's identity
  (`VOICES`: one synthesiser voice at another speed or language is the same voice). A recording
  that appears twice (lf3 and lf6 reuse the manifest's real clips; lf6 some of lf3's prompts)
  counts once.
- ``--exclude F``: leave out every item of a *voice* that speaks in long file F (not only F's
  own utterances), so thresholds "for F" are chosen without any of F's speakers.
- trials, at each probe length (1.0 s = `new_speaker_s`, 3.0 s = `match_long_s`): a probe is the
  middle of an item cut to that length, embedded as the labeller embeds a final (1.6 s windows
  every `window_hop_s`, their unit mean); a target trial compares it with the centroid of the
  other items of its voice (as `SpeakerTracker` sums them: unit embeddings weighted by speech
  seconds, at most `max_weight_s`), a non-target trial with each other voice's centroid.
- the threshold is the equal-error point: the similarity where the share of target trials
  below it (a known voice taken for new) equals the share of non-target trials at or above it
  (a newcomer taken for known). Each voice counts equally (a trial weighs 1 / its voice's
  trials; a non-target trial 1 / its voice pair's), so a voice with 40 prompts does not set it.
- ``update_threshold``: the 3 s similarity that only 1 % of (weighted) non-target trials reach:
  a centroid moves only on a confident decision.
- ``split_threshold``: the equal-error point of another test, the one a split makes (see
  `split_trials`): the two halves of one recording against halves of two voices.
- ``partial_threshold_{s}s``: the similarity that names a partial of ``s`` seconds (an
  utterance's first seconds) at 1 % false names, and the share of known voices it names
  (`partial_trials`; `SpeakerConfig.partial_threshold`, issue 37); under the model's window
  (0.8-1.2 s for CAM++), one short window of all the probe's audio, as a first partial is
  embedded (`SpeakerConfig.partial_short_threshold`).

Prints one JSON line: the thresholds, and the EER and trial counts behind each.

Measured (scripts/eval_meeting.py ``--replay`` of the same finals, base model; DER with a 0.25 s
collar, cpWER, and stream WER, which labels do not change), "held out": thresholds from
``--exclude`` of the file scored; "tuned": the earlier defaults, set on lf3 and lf2 themselves
(0.75 / 0.66 / 0.78 / 0.70, 1.6 s pieces, 3 pieces). The shipped defaults are the calibration
on every voice (0.72 / 0.71 / 0.73 / 0.70) with 1.2 s pieces, 5 pieces and
`piece_new_speaker_s` 2.0.

    file path     tuned DER / cpWER   held out DER / cpWER   shipped DER / cpWER   WER
    lf3  live     0.025 /  9.3 %      0.030 /  9.2 %         0.030 /  9.2 %        7.79 %
    lf2  live     0.003 /  3.5 %      0.009 /  4.0 %         0.009 /  4.0 %        2.99 %
    lf6  live     0.053 / 13.5 %      0.053 / 13.5 %         0.037 / 10.6 %        8.23 %
    lf3  offline  0.027 / 10.4 %      0.024 /  9.3 %         0.024 /  9.3 %        7.48 %
    lf2  offline  0.063 / 18.4 %      0.026 /  9.5 %         0.026 /  9.5 %        2.74 %
    lf6  offline  0.053 / 12.8 %      0.053 / 12.8 %         0.053 / 12.8 %        7.51 %

Caveats: lf3 and lf6 share their voices (the IVR voice and the manifest's real clips), so for
them "held out" leaves out every recorded voice and calibrates on synthetic ones only; the
structural settings (piece lengths and counts) were chosen on these same files.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, cast

import numpy as np

from streamcap.audio.file import load_audio
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.speakers import SpeakerConfig, config_for, mean_embedding, unit
from streamcap.evaluation.paths import EVAL_DEV

SR = SAMPLE_RATE
EVAL = EVAL_DEV
LONG = {"lf2": "lf2_tts_meeting", "lf3": "lf3_real_dev", "lf6": "lf6_short_dev"}
#: Speaker names of the data -> voice identity (others are their own).
VOICES = {
    "piper_joe_fast": "piper_joe", "piper_joe_slow": "piper_joe", "joe": "piper_joe",
    "maria": "slt", "festival_slt_hts": "slt", "flite_slt": "slt",  # CMU Arctic SLT
    "ken": "flite_rms", "priya": "flite_awb",
    "espeak_en_us": "espeak_m", "espeak_en_gb_f": "espeak_f",
}  # fmt: skip
#: Probe lengths (seconds) and the SpeakerConfig field each one sets.
PROBES = {1.0: "short_match_threshold", 3.0: "match_threshold"}
#: Share of non-target trials allowed at or above `update_threshold`.
UPDATE_FAR = 0.01


def text_key(text: str, v: str) -> str:
    """A recording's identity for de-duplication: its words (letters only) and its voice."""
    return " ".join(re.sub(r"[^a-z ]", " ", text.lower()).split()) + "|" + voice(v)


def voice(name: str) -> str:
    if name.startswith("espeak-ng"):
        return "espeak_f" if "+f" in name else "espeak_m"
    return VOICES.get(name, name)


def load_items(eval_dir: Path) -> list[dict[str, Any]]:
    """Every speech item: {voice, key (the recording, for de-duplication), audio, source}."""
    items: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(v: str, key: str, audio: np.ndarray, source: str) -> None:
        if key in seen or len(audio) < SR // 2:
            return
        seen.add(key)
        items.append({"voice": voice(v), "key": key, "audio": audio, "source": source})

    for line in (eval_dir / "manifest.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["kind"] not in ("real", "tts"):
            continue
        a = load_audio(str(eval_dir / row["audio"]))
        add(row["speaker"], text_key(row["text"], row["speaker"]), a, "manifest")
    for short, name in LONG.items():
        ref = json.loads((eval_dir / "longform" / f"{name}.json").read_text())
        audio = load_audio(str(eval_dir / "longform" / f"{name}.wav"))
        for s in ref["segments"]:
            clip = audio[int(s["start"] * SR) : int(s["end"] * SR)]
            add(s["speaker"], text_key(s["text"], s["speaker"]), clip, short)
    return items


def long_file_voices(eval_dir: Path, short: str) -> set[str]:
    ref = json.loads((eval_dir / "longform" / f"{LONG[short]}.json").read_text())
    return {voice(s["speaker"]) for s in ref["segments"]}


def middle(audio: np.ndarray, seconds: float) -> np.ndarray | None:
    n = int(seconds * SR)
    if len(audio) < n:
        return None
    a = (len(audio) - n) // 2
    return audio[a : a + n]


def embed(encoder: Any, audio: np.ndarray, hop_s: float) -> np.ndarray:
    """A final's embedding as the labeller makes it (`SpeakerLabeller._label`)."""
    _, windows = encoder.embed_partials(audio, hop_s)
    return mean_embedding(windows)


def weighted_eer(
    target: list[tuple[float, float]], nontarget: list[tuple[float, float]]
) -> tuple[float, float]:
    """(threshold, EER) of weighted scores ``(score, weight)``: where the weighted share of
    targets below the threshold meets the weighted share of non-targets at or above it."""
    t = np.array(target)
    n = np.array(nontarget)
    grid = np.unique(np.concatenate([t[:, 0], n[:, 0]]))
    frr = np.array([t[t[:, 0] < g, 1].sum() for g in grid]) / t[:, 1].sum()
    far = np.array([n[n[:, 0] >= g, 1].sum() for g in grid]) / n[:, 1].sum()
    k = int(np.argmin(np.abs(frr - far)))
    lo = grid[k - 1] if k > 0 else grid[k]  # midway between two scores, not on one
    return float((lo + grid[k]) / 2), float((frr[k] + far[k]) / 2)


def far_threshold(nontarget: list[tuple[float, float]], far: float) -> float:
    """The least similarity that at most ``far`` of the (weighted) non-targets reach."""
    n = np.array(sorted(nontarget, reverse=True))
    cum = np.cumsum(n[:, 1]) / n[:, 1].sum()
    k = int(np.searchsorted(cum, far, side="right"))
    return float(n[min(k, len(n) - 1), 0] + 1e-4)


def calibrate(items: list[dict[str, Any]], encoder: Any, cfg: SpeakerConfig) -> dict[str, Any]:
    by_voice: dict[str, list[int]] = defaultdict(list)
    for i, it in enumerate(items):
        by_voice[it["voice"]].append(i)
    full = [embed(encoder, it["audio"], cfg.window_hop_s) for it in items]
    weight = [min(len(it["audio"]) / SR, cfg.max_weight_s) for it in items]

    def centroid(v: str, leave: int | None = None) -> np.ndarray | None:
        rows = [j for j in by_voice[v] if j != leave]
        if not rows:
            return None
        total = sum(full[j].astype(np.float64) * weight[j] for j in rows)
        return unit(cast(np.ndarray, total))

    centroids = {v: centroid(v) for v in by_voice}
    out: dict[str, Any] = {"voices": {v: len(ix) for v, ix in sorted(by_voice.items())}}
    for seconds, field in PROBES.items():
        tgt: dict[str, list[float]] = defaultdict(list)
        non: dict[tuple[str, str], list[float]] = defaultdict(list)
        for i, it in enumerate(items):
            probe = middle(it["audio"], seconds)
            if probe is None:
                continue
            e = embed(encoder, probe, cfg.window_hop_s)
            own = centroid(it["voice"], leave=i)
            if own is not None:
                tgt[it["voice"]].append(float(e @ own))
            for v, c in centroids.items():
                if v != it["voice"] and c is not None:
                    non[(it["voice"], v)].append(float(e @ c))
        target = [(s, 1 / len(ss)) for ss in tgt.values() for s in ss]
        nontarget = [(s, 1 / len(ss)) for ss in non.values() for s in ss]
        threshold, eer = weighted_eer(target, nontarget)
        out[field] = round(threshold, 3)
        out[f"eer_{seconds:g}s"] = round(eer, 4)
        out[f"trials_{seconds:g}s"] = {"target": len(target), "nontarget": len(nontarget),
                                       "target_voices": len(tgt)}  # fmt: skip
        if field == "match_threshold":
            out["update_threshold"] = round(far_threshold(nontarget, UPDATE_FAR), 3)
    out.update(split_trials(items, encoder, cfg))
    out.update(partial_trials(items, encoder, cfg, full, weight, by_voice))
    return out


#: Partial lengths (seconds of audio) tried for `partial_min_s` and `partial_short_min_s`
#: (under a CAM++ window, 1.5 s, a probe is one short window of all its audio).
PARTIAL_PROBES = (0.8, 0.9, 1.0, 1.2, 1.6, 2.0, 2.5, 3.0)
#: Share of non-target trials allowed at or above `partial_threshold`.
PARTIAL_FAR = 0.01


def partial_trials(
    items: list[dict[str, Any]],
    encoder: Any,
    cfg: SpeakerConfig,
    full: list[np.ndarray],
    weight: list[float],
    by_voice: dict[str, list[int]],
) -> dict[str, Any]:
    """`partial_threshold`: a partial is named only at a similarity that at most
    `PARTIAL_FAR` of the (weighted) non-target trials reach. A probe is the *start* of an item
    (a partial is the start of an utterance) cut to each of `PARTIAL_PROBES`, embedded as the
    labeller embeds a partial (its whole windows only); targets and non-targets as in
    `calibrate`. Per length: the threshold and the share of targets it names
    (``partial_names_{s}s``), from which `partial_min_s` is chosen (the shortest length that
    names most of a known voice's partials)."""
    window_s = float(getattr(encoder, "window_s", 1.6))
    out: dict[str, Any] = {}
    for seconds in PARTIAL_PROBES:
        tgt: dict[str, list[float]] = defaultdict(list)
        non: dict[tuple[str, str], list[float]] = defaultdict(list)
        for i, it in enumerate(items):
            n = int(seconds * SR)
            if len(it["audio"]) < n:
                continue
            starts, windows = encoder.embed_partials(it["audio"][:n], cfg.window_hop_s)
            whole = starts + window_s <= seconds + 1e-6
            e = mean_embedding(windows[whole] if whole.any() else windows[:1])
            for v, rows in by_voice.items():
                rows = [j for j in rows if j != i]
                if not rows:
                    continue
                c = unit(
                    cast(np.ndarray, sum(full[j].astype(np.float64) * weight[j] for j in rows))
                )
                if v == it["voice"]:
                    tgt[v].append(float(e @ c))
                else:
                    non[(it["voice"], v)].append(float(e @ c))
        nontarget = [(s, 1 / len(ss)) for ss in non.values() for s in ss]
        threshold = far_threshold(nontarget, PARTIAL_FAR)
        hits = [np.mean([x >= threshold for x in ss]) for ss in tgt.values()]
        out[f"partial_threshold_{seconds:g}s"] = round(threshold, 3)
        out[f"partial_names_{seconds:g}s"] = round(float(np.mean(hits)), 3) if hits else None
    return out


def split_trials(items: list[dict[str, Any]], encoder: Any, cfg: SpeakerConfig) -> dict[str, Any]:
    """`split_threshold`: a final is split where its two sides' embeddings are less similar
    than this. Target trials: the two halves of one item (one voice, one recording, as the two
    sides of a final are); non-target: a half of one item with a half of another voice's.
    Items of at least two `min_piece_s` take part."""
    halves = []
    for it in items:
        n = len(it["audio"])
        if n >= 2 * cfg.min_piece_s * SR:
            a, b = it["audio"][: n // 2], it["audio"][n // 2 :]
            halves.append((it["voice"], embed(encoder, a, cfg.window_hop_s),
                           embed(encoder, b, cfg.window_hop_s)))  # fmt: skip
    tgt: dict[str, list[float]] = defaultdict(list)
    non: dict[tuple[str, str], list[float]] = defaultdict(list)
    for v, left, right in halves:
        tgt[v].append(float(left @ right))
        for w, _, other in halves:
            if w != v:
                non[(v, w)].append(float(left @ other))
    target = [(s, 1 / len(ss)) for ss in tgt.values() for s in ss]
    nontarget = [(s, 1 / len(ss)) for ss in non.values() for s in ss]
    threshold, eer = weighted_eer(target, nontarget)
    return {"split_threshold": round(threshold, 3), "eer_split": round(eer, 4),
            "trials_split": {"target": len(target), "nontarget": len(nontarget),
                             "target_voices": len(tgt)}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eval-dir", type=Path, default=EVAL)
    ap.add_argument(
        "--exclude", action="append", default=[], choices=sorted(LONG),
        help="leave out every voice that speaks in this long file (repeatable)",
    )  # fmt: skip
    ap.add_argument("--json", type=Path, help="write the result here too")
    ap.add_argument("--model", default="ge2e", help="speaker embedding model (ge2e, campplus)")
    args = ap.parse_args(argv)

    from streamcap.speakers import load_encoder

    items = load_items(args.eval_dir)
    excluded: set[str] = set()
    for short in args.exclude:
        excluded |= long_file_voices(args.eval_dir, short)
    items = [it for it in items if it["voice"] not in excluded]
    # the model's windows as its labeller embeds them (CAM++: every 1.5 s, GE2E: 0.4 s)
    out = calibrate(items, load_encoder(args.model), config_for(args.model))
    out["model"] = args.model
    out.update(excluded=sorted(args.exclude), excluded_voices=sorted(excluded), items=len(items))
    line = json.dumps(out)
    print(line)
    if args.json:
        args.json.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
