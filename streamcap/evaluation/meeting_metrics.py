"""Speaker labels against reference speakers: DER and cpWER (docs/design.md, "Measurement").

scripts/eval_meeting.py's figures, apart from its runs (`meeting_runs`). Hypothesis turns are
the finals' spans with their labels; pyannote.metrics scores them as a diarization, meeteval
scores the labels' texts as a transcript per speaker. Both libraries are imported only here,
when a figure is computed.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from streamcap.core.captions import Caption
from streamcap.evaluation.metrics import Segments, Timeline, percentile, wer
from streamcap.evaluation.normalize import Normalizer

if TYPE_CHECKING:
    from streamcap.runtime.labeller import SpeakerLabeller

#: NIST collar (seconds each side of a reference boundary); pyannote takes the whole width.
COLLAR_S = 0.25
UNLABELLED = "?"


def finals_of(events: Timeline) -> list[Caption]:
    """The finals with text, in order."""
    return [c for _, c in events if c.type == "final" and c.text.strip()]


def hypothesis_turns(finals: list[Caption], span: str = "final") -> list[tuple[float, float, str]]:
    """(start, end, label) per final: its ``[start, end]`` ("final"), or its words' span
    ("words": first word start to last word end; [start, end] when it has no word times)."""
    turns = []
    for c in finals:
        a, b = (c.start, c.end)
        if span == "words" and c.words:
            a, b = c.words[0].start, c.words[-1].end
        if b > a:
            turns.append((a, b, c.speaker or UNLABELLED))
    return turns


def diarization(
    segments: Segments, turns: list[tuple[float, float, str]], collar_s: float
) -> dict[str, Any]:
    """DER (pyannote.metrics) of hypothesis turns against the reference segments."""
    from pyannote.core import Annotation, Segment
    from pyannote.metrics.diarization import DiarizationErrorRate

    ref = Annotation()
    for i, s in enumerate(segments):
        ref[Segment(s["start"], s["end"]), i] = s["speaker"]
    hyp = Annotation()
    for i, (a, b, label) in enumerate(turns):
        hyp[Segment(a, b), i] = label
    metric = DiarizationErrorRate(collar=2 * collar_s, skip_overlap=False)
    detail = metric(ref, hyp, detailed=True)
    mapping = metric.optimal_mapping(ref, hyp)
    return {
        "der": float(detail["diarization error rate"]),
        "missed_s": float(detail["missed detection"]),
        "false_alarm_s": float(detail["false alarm"]),
        "confusion_s": float(detail["confusion"]),
        "scored_s": float(detail["total"]),
        "label_map": {str(k): str(v) for k, v in mapping.items()},
    }


def cp_wer(segments: Segments, finals: list[Caption], norm: Normalizer) -> dict[str, Any]:
    """meeteval cpWER: per speaker / label the concatenated normalised text."""
    import meeteval

    ref: dict[str, list[str]] = defaultdict(list)
    for s in segments:
        ref[s["speaker"]].append(norm(s["text"]))
    hyp: dict[str, list[str]] = defaultdict(list)
    for c in finals:
        hyp[c.speaker or UNLABELLED].append(norm(c.text))
    r = meeteval.wer.cp_word_error_rate(
        {k: " ".join(v) for k, v in ref.items()}, {k: " ".join(v) for k, v in hyp.items()}
    )
    return {
        "cpwer": float(r.error_rate),
        "cpwer_errors": int(r.errors),
        "cpwer_length": int(r.length),
        "cpwer_missed_speakers": int(r.missed_speaker),
        "cpwer_falarm_speakers": int(r.falarm_speaker),
        "cpwer_assignment": [list(a) for a in r.assignment],
    }


def meeting_metrics(
    events: Timeline,
    segments: Segments,
    duration: float,
    norm: Normalizer,
    labeller: SpeakerLabeller,
) -> dict[str, Any]:
    """DER (with and without collar, and on the finals' words' spans), cpWER, the stream WER
    of the same finals, the labels given, and the voice encoder's time per final."""
    finals = finals_of(events)
    turns = hypothesis_turns(finals)
    d = diarization(segments, turns, COLLAR_S)
    d0 = diarization(segments, turns, 0.0)
    dw = diarization(segments, hypothesis_turns(finals, "words"), COLLAR_S)
    ref_text = norm(" ".join(s["text"] for s in segments))
    hyp_text = norm(" ".join(c.text for c in finals))
    embed = [r.embed_ms for r in labeller.records if r.embed_ms > 0]
    audio_s = sum(r.end - r.start for r in labeller.records if r.embed_ms > 0)
    out: dict[str, Any] = {
        **d,
        "der_no_collar": d0["der"],
        "der_words": dw["der"],
        "der_words_missed_s": dw["missed_s"],
        **cp_wer(segments, finals, norm),
        "stream_wer": wer(ref_text, hyp_text),
        "labels": len({c.speaker for c in finals if c.speaker}),
        "reference_speakers": len({s["speaker"] for s in segments}),
        "finals": len(finals),
        "unlabelled_finals": sum(not c.speaker for c in finals),
        "split_finals": sum(r.pieces > 1 for r in labeller.records),
        "embed_ms_mean": float(np.mean(embed)) if embed else None,
        "embed_ms_p50": percentile(embed, 50),
        "embed_ms_p95": percentile(embed, 95),
        "embed_ms_max": max(embed) if embed else None,
        "embed_ms_per_audio_s": (sum(embed) / audio_s) if audio_s > 0 else None,
    }
    out["cpwer_minus_stream_wer"] = out["cpwer"] - out["stream_wer"]
    out.update(partial_figures(events, segments, d["label_map"], labeller))
    return out


def partial_figures(
    events: Timeline, segments: Segments, label_map: dict[str, str], labeller: SpeakerLabeller
) -> dict[str, Any]:
    """`partial_names.partial_name_figures` as a viewer sees them now (an unnamed partial on
    its own line) and as the overlay showed them before (under the previous final's name,
    keys ``*_prev``), and the labeller's added cost per partial (``partial_embed_ms_*``: every
    partial it saw with text, those it embedded nothing for counted as 0)."""
    from streamcap.evaluation.partial_names import partial_name_figures

    out = partial_name_figures(events, segments, label_map, "own_line")
    prev = partial_name_figures(events, segments, label_map, "previous")
    out.update({f"{k}_prev": v for k, v in prev.items() if k.startswith(("partial_", "nam"))})
    cost = [r.embed_ms for r in labeller.partial_records]
    out["partials_named"] = sum(bool(r.speaker) for r in labeller.partial_records)
    out["partial_embed_ms_mean"] = float(np.mean(cost)) if cost else None
    out["partial_embed_ms_p95"] = percentile(cost, 95)
    out["partial_embed_ms_max"] = max(cost) if cost else None
    return out
