"""Who is speaking, from voice embeddings: online clustering into persistent labels. Pure
(numpy only): the embeddings come from `streamcap.speakers.VoiceEncoder`, the caption stage
that uses this is `streamcap.runtime.labeller.SpeakerLabeller`.

- `SpeakerTracker`: one meeting's speakers. Each is a running centroid of the unit embeddings
  assigned to it with confidence. A final goes to the nearest centroid (cosine similarity) when
  that is close enough; otherwise, with enough speech and room for one more, it founds a new
  speaker. Decisions are final: a label never changes once given (nothing is re-clustered).
  A speaker may be *enrolled* before anyone speaks (`enrol`: a sample of a named voice), so
  the first final of that voice carries its name; the others are numbered as before.
- Where a final splits when the voice changes inside it: `core.speaker_changes`.

Similarities are cosines of unit vectors (resemblyzer's embeddings are non-negative, so they
lie in [0, 1]). The thresholds are calibrated on clips of known voices by
scripts/calibrate_speakers.py, and measured with scripts/eval_meeting.py (see `SpeakerConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = ["MODEL_THRESHOLDS", "SpeakerConfig", "SpeakerTracker", "config_for"]

Vector = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True)
class SpeakerConfig:
    """Speaker labelling settings. The similarity thresholds are *calibrated*, not tuned on a
    meeting: scripts/calibrate_speakers.py sets each one at the equal-error point of the
    verification test it stands for, on trials of known voices (the dev clips of
    shared/eval-dev/manifest.jsonl and the reference utterances of the long files lf2, lf3 and
    lf6: 163 recordings of 17 voices, each voice weighted equally), never by the DER of a
    file. With every voice of a long file left out of the calibration, the thresholds move by
    at most 0.04 (lf3/lf6: 0.70 / 0.76 / 0.78 / 0.71; lf2: 0.72 / 0.72 / 0.76 / 0.70, in the
    order below). DER and cpWER per file with those held-out thresholds: the table in
    scripts/calibrate_speakers.py.

    - match_threshold: a final with at least `match_long_s` of speech whose similarity to the
      nearest speaker's centroid is at least this is that speaker; otherwise (with
      `new_speaker_s` of speech) it founds a new one. Calibrated: 3 s probes against the
      centroid of the other recordings of their voice (target) or of another voice
      (non-target), equal error 1.4 % at 0.723. (Tuned on lf3 before: 0.75.)
    - short_match_threshold: the threshold for a final of `new_speaker_s`, rising (or falling)
      linearly to `match_threshold` at `match_long_s`. Calibrated as above with 1 s probes:
      equal error 3.5 % at 0.706. (Before: 0.66, set for lf2's 1.1 s "Great.", 0.68 from its
      speaker's centroid; with 0.71 it founds a fifth label there.)
    - match_long_s: see above (2-4 s gave the same labels).
    - new_speaker_s: the least speech (seconds) that may found a new speaker; a shorter final
      joins the nearest speaker. 1.2: lf3's only utterance of one speaker (1.16 s) joins
      another (cpWER +2.8 against +1.6); 0.8-1.0 the same labels.
    - max_speakers: labels are never more than this; past it every final joins the nearest.
    - update_threshold: a final updates its speaker's centroid only at this similarity or more
      (and with at least `min_embed_s` of speech), so a doubtful assignment does not drag the
      centroid towards another voice. Calibrated: the 3 s similarity that 1 % of the
      non-target trials reach (0.729).
    - max_weight_s: speech seconds one final counts for at most in a centroid, so a long
      reading does not freeze its speaker's centroid (3-100 s: the same labels; a guard).
    - min_embed_s: finals with less speech than this (one-word answers) have no trustworthy
      embedding: see `short` (0.5-1.0 gave the same labels).
    - short: what a final under `min_embed_s` gets: "nearest" the nearest speaker (no new
      speaker, no update), "previous" the label of the final before it, "none" no label ("").
      On lf2 a short final is mostly a turn's first word ("Agreed.", "Okay"), i.e. a new
      speaker: "previous" gave cpWER +2.7, "none" +3.0, "nearest" +0.5 (lf3: all alike).
    - split_threshold: a final is split at a word boundary when the mean embeddings of the
      windows before and after it are less similar than this, and its pieces then go to
      different speakers (else it stays whole). Calibrated: the two halves of one recording
      (target) against halves of two voices, equal error 0.9 % at 0.701 (the two
      distributions barely meet: on the recorded voices alone the lowest same-voice pair is
      0.701, the highest cross-voice one 0.692). Earlier, on 50 synthetic two-voice finals,
      0.70 found 49 of 50 changes and split none of 30 same-voice finals.
    - min_piece_s: the least speech (first word start to last word end) on each side of a
      split. 1.2: an offline final (one VAD utterance) often holds several turns (lf2's
      49.6-66.5 s: four speakers, 0.3-0.4 s apart); with 1.6 and 3 pieces lf2's offline DER
      was 0.063 and cpWER 18.4 %, with 1.2 and 5 pieces 0.026 and 9.5 % (lf3 offline 0.027
      -> 0.024; lf6 and every live run unchanged: live finals are shorter). Shorter sides
      split more same-voice finals by mistake (at 0.70: 2 % of same-voice 1.6 s side pairs,
      5 % at 1.2 s; 8 % / 14 % on the recorded voices), but a false split is undone when both
      pieces go to the same speaker (see `runtime.labeller`).
    - window_hop_s: hop between the 1.6 s windows along a final (their mean is the final's
      embedding; their sides are compared for a split). 0.8 halves the cost and gave the same
      labels, but only 35 of the 50 synthetic changes at the right word +-1 (0.4: 44).
    - max_pieces: the most pieces one final is split into (5: an offline utterance may hold
      four turns).
    - piece_new_speaker_s: a split stands only if every piece that would found a new
      speaker has this much speech; otherwise the final is taken whole (as when every piece
      goes to one speaker). A change seen inside one final is weaker evidence than a final of
      its own, and the centroid a short piece is compared with may be one piece old: JFK's
      "And so my fellow Americans, | ask not" splits at 0.66, and its second piece was 0.69
      from the first, a third label for two voices (tests/speakers/test_speakers.py) at the
      calibrated thresholds. Chosen on the dev files, not calibrated: 1.5 and 2.0 gave lf3
      offline DER 0.024 (cpWER 9.7 %, 9.3 %), 3.0 lost a speaker first heard inside a final
      (0.036, 11.5 %); lf2, lf6 and the live runs (no split there) the same for all three.
    - name_partials: name a partial from its own audio when the voice is confidently known
      (`core.speaker_partials.name_partial`); off: partials carry no speaker. Otherwise a
      partial is unnamed ("") until its final is labelled: a partial never shows a name
      nobody decided.
    - partial_min_s: the least audio (a partial's span so far) before it may be named: one
      whole embedding window (GE2E's 1.6 s), i.e. an utterance's second partial at the
      default `partial_interval_s` (the first has 1.0-1.1 s).
    - partial_threshold: a partial is named only at this similarity to its nearest speaker's
      centroid or more. Calibrated (scripts/calibrate_speakers.py) as `update_threshold`:
      the similarity that 1 % of the non-target trials reach, probes being an utterance's
      first `partial_min_s` seconds, i.e. a voice never heard taken for a known one once in
      a hundred: 0.751 (it names 98.6 % of the known voices' probes; 2-3 s probes: 0.743-0.749,
      98.6 %). Shorter probes name fewer at a higher threshold (1.0 s: 0.778, 54 %; 1.2 s:
      0.758, 86 %); naming first partials (1.0 s, thresholds falling from 0.78 to 0.75 at
      1.6 s) named 7 of lf3's 24 returning voices within 1.5 s (none at 1.6 s), but showed a
      never-heard voice's first partial under another's name for 1.6 s: not taken.
    - partial_margin: ... and at least this much above the second nearest (two known voices
      both near: no name). Chosen, not calibrated.
    - partial_hop_s / partial_max_windows: a partial's windows are every `partial_hop_s`
      (twice `window_hop_s`: a partial needs its voice, not a change point's word), and no
      more than `partial_max_windows` per utterance (past them its name stands as it is, or
      its final's comes): a partial's cost is then about one window per second of new audio,
      bounded per utterance (eval_meeting.py's partial_embed_ms_*).
    - partial_short_threshold / partial_short_min_s: a partial shorter than `partial_min_s`
      (an utterance's first, 1.0-1.1 s) is named from `partial_short_min_s` of audio, at this
      threshold, from one short window of all its audio (`runtime.partial_names`); None: not
      named (GE2E: its 1.0 s figures above). Set only where calibrated (CAM++), as
      `partial_threshold`: the similarity 1 % of non-target trials reach, probes being an
      utterance's first 0.9, 1.0 and 1.2 s, each one short window (calibrate_speakers.py
      ``partial_threshold_{0.9,1,1.2}s``; the highest of the three taken). CAM++ on every
      voice: 0.457 / 0.481 / 0.495 (names 97-98 % of the known voices' probes); voices of lf3
      / lf6 left out: 0.474 / 0.459 / 0.505, of lf2: 0.541 / 0.515 / 0.542 (93-98 %). The
      1 % tail is a few trials, so it moves by 0.05 between held-out sets. Not strict enough
      on the meetings: lf3's dhd (one turn, never heard before) scored 0.626 from its first
      1.1 s against another voice's centroid, 1.1 s under a wrong name at 0.50-0.60. At 0.1 %
      of non-target trials: 0.541 / 0.614 / 0.608 (every voice, and lf2's left out; lf3's
      left out leaves 7 voices, too few for 0.1 %). Shipped 0.65, the least of 0.50-0.70
      (step 0.05) with no partial under a wrong name on lf2, lf3 and lf6; caution: lf3's own
      figure set it, no held-out choice did. Live CAM++ runs relabelled (eval_meeting
      --replay), naming delay of a returning voice p50 / p95 and named within 1.5 s, before
      -> 0.65: lf3 2.14 / 2.44, 0 of 24 -> 1.14 / 2.42, 15; lf6 1.55 / 2.45, 9 of 22 -> 1.34
      / 2.25, 16; lf2 2.15 / 2.28, 4 of 28 -> 1.03 / 2.19, 21; DER, cpWER unchanged.
    """

    match_threshold: float = 0.72
    short_match_threshold: float = 0.71
    match_long_s: float = 3.0
    new_speaker_s: float = 1.0
    max_speakers: int = 12
    update_threshold: float = 0.73
    max_weight_s: float = 6.0
    min_embed_s: float = 0.8
    short: Literal["previous", "nearest", "none"] = "nearest"
    split_threshold: float = 0.70
    min_piece_s: float = 1.2
    window_hop_s: float = 0.4
    max_pieces: int = 5
    piece_new_speaker_s: float = 2.0
    name_partials: bool = True
    partial_min_s: float = 1.6
    partial_threshold: float = 0.75
    partial_margin: float = 0.05
    partial_hop_s: float = 0.8
    partial_max_windows: int = 8
    partial_short_threshold: float | None = None
    partial_short_min_s: float = 0.9

    def __post_init__(self) -> None:
        if not 0.0 <= self.match_threshold <= 1.0 or not 0.0 <= self.update_threshold <= 1.0:
            raise ValueError("similarity thresholds must be in [0, 1]")
        if self.max_speakers < 1 or self.max_pieces < 1:
            raise ValueError("max_speakers and max_pieces must be >= 1")
        if self.window_hop_s <= 0 or self.max_weight_s <= 0:
            raise ValueError("window_hop_s and max_weight_s must be > 0")
        if self.short not in ("previous", "nearest", "none"):
            raise ValueError("short must be 'previous', 'nearest' or 'none'")
        if self.partial_short_threshold is not None and not (
            0.0 < self.partial_short_min_s <= self.partial_min_s
        ):
            raise ValueError("partial_short_min_s must be in (0, partial_min_s]")


#: Each speaker model's calibrated configuration (scripts/calibrate_speakers.py --model NAME;
#: an embedding's similarities are on its own scale): GE2E's are `SpeakerConfig`'s defaults.
MODEL_THRESHOLDS: dict[str, SpeakerConfig] = {
    "ge2e": SpeakerConfig(),
    # CAM++ separates voices far more (same voice 0.69-0.89, other voices -0.15-0.37 on the
    # dev clips, against GE2E's 0.8 / 0.5-0.65): thresholds set midway, and kept by
    # leave-one-file-out (streamcap/evaluation/compare_speakers.py: on every held-out file
    # the other files chose them as they are, from +-0.12 around). 1.5 s windows end to end
    # (a window costs about six of GE2E's; every 0.8 s gave the same labels on every file)
    "campplus": SpeakerConfig(
        match_threshold=0.50,
        short_match_threshold=0.45,
        update_threshold=0.55,
        split_threshold=0.45,
        window_hop_s=1.5,
        partial_min_s=1.5,
        partial_threshold=0.55,
        partial_hop_s=1.5,
        partial_short_threshold=0.65,  # see SpeakerConfig: above the calibrated 0.61
        partial_short_min_s=0.9,
    ),
}


def config_for(model: str) -> SpeakerConfig:
    """``model``'s calibrated `SpeakerConfig` (a key of `MODEL_THRESHOLDS`)."""
    if model not in MODEL_THRESHOLDS:
        raise ValueError(f"unknown speaker model {model!r}")
    return MODEL_THRESHOLDS[model]


@dataclass(frozen=True)
class Decision:
    """Where one embedding goes: ``speaker`` (an index, or None: no label), the similarity to
    that speaker's centroid (1.0 for a new one), and whether it founds a new speaker."""

    speaker: int | None
    similarity: float
    new: bool = False


def unit(v: npt.NDArray[np.floating]) -> Vector:
    """``v`` scaled to unit length (zeros stay zeros)."""
    x = np.asarray(v, dtype=np.float32)
    n = float(np.linalg.norm(x))
    return x / np.float32(n) if n > 0 else x


def label_name(index: int) -> str:
    """The label of speaker ``index``: "Speaker 1", "Speaker 2", ..."""
    return f"Speaker {index + 1}"


class SpeakerTracker:
    """One meeting's speakers (online, decisions never revised).

    ``decide(embedding, speech_s)`` says where a final goes without changing anything;
    ``commit`` applies it (founds the speaker, or updates the centroid when confident);
    ``assign`` does both. ``previous`` is the last committed speaker; ``heard``: any final
    was; ``label(k)`` is speaker k's label.
    """

    def __init__(self, config: SpeakerConfig | None = None) -> None:
        self.config = config or SpeakerConfig()
        self._sums: list[npt.NDArray[np.float64]] = []
        self.speech_s: list[float] = []
        self.previous: int | None = None
        self.heard = False
        self._names: list[str | None] = []

    def __len__(self) -> int:
        return len(self._sums)

    def enrol(self, name: str, embedding: Vector, speech_s: float) -> int:
        """Found speaker ``name`` from a unit embedding of ``speech_s`` seconds of its voice
        (`runtime.enrol`), before or during the meeting: appended, so no label changes."""
        if not name or name in self._names:
            raise ValueError(f"enrol distinct names: {name!r}")
        self._sums.append(
            unit(embedding).astype(np.float64) * min(speech_s, self.config.max_weight_s)
        )
        self.speech_s.append(0.0)  # the sample is not the meeting's speech
        self._names.append(name)
        return len(self._sums) - 1

    def label(self, index: int) -> str:
        """Speaker ``index``'s label: its enrolled name, else "Speaker N", N counting only the
        speakers nobody named (with Mary enrolled, the first other voice is "Speaker 1")."""
        name = self._names[index]
        return name or label_name(sum(1 for n in self._names[:index] if not n))

    def centroids(self) -> Matrix:
        """(speakers, dim) unit centroids."""
        if not self._sums:
            return np.zeros((0, 0), np.float32)
        return np.stack([unit(s) for s in self._sums])

    def similarities(self, embedding: Vector) -> npt.NDArray[np.float32]:
        """Cosine similarity of a unit embedding to each speaker's centroid."""
        if not self._sums:
            return np.zeros(0, np.float32)
        return np.asarray(self.centroids() @ unit(embedding), dtype=np.float32)

    def threshold(self, speech_s: float) -> float:
        """The similarity that makes a final of ``speech_s`` seconds a known speaker's:
        `short_match_threshold` at `new_speaker_s`, rising linearly to `match_threshold` at
        `match_long_s` (a shorter clip's embedding is noisier, so it lies further from its
        own speaker's centroid)."""
        cfg = self.config
        lo, hi = cfg.short_match_threshold, cfg.match_threshold
        span = cfg.match_long_s - cfg.new_speaker_s
        f = 1.0 if span <= 0 else min(1.0, max(0.0, (speech_s - cfg.new_speaker_s) / span))
        return lo + f * (hi - lo)

    def decide(self, embedding: Vector, speech_s: float) -> Decision:
        """Where a final of ``speech_s`` seconds with this unit embedding goes (see
        `SpeakerConfig`); nothing changes until `commit`. The meeting's first final with at
        least `min_embed_s` founds Speaker 1, also when it matches no enrolled voice (a short
        one is then unnamed: a sample is no reason to give its name to a stranger)."""
        cfg = self.config
        sims = self.similarities(embedding)
        best = int(np.argmax(sims)) if sims.size else None
        if speech_s < cfg.min_embed_s:  # too little speech for a trustworthy embedding
            if cfg.short == "none" or best is None or not self.heard:
                return Decision(None, 0.0)
            k = self.previous if cfg.short == "previous" and self.previous is not None else best
            return Decision(k, float(sims[k]))
        if best is None:  # nobody yet
            return Decision(0, 1.0, new=True)
        best_sim = float(sims[best])
        if best_sim >= self.threshold(speech_s):
            return Decision(best, best_sim)
        founds = speech_s >= cfg.new_speaker_s or not self.heard
        if founds and len(self._sums) < cfg.max_speakers:
            return Decision(len(self._sums), 1.0, new=True)
        return Decision(best, best_sim)

    def copy(self) -> SpeakerTracker:
        """An independent copy (to try decisions and go back)."""
        other = SpeakerTracker(self.config)
        other._sums = list(self._sums)  # arrays are replaced on update, never changed
        other.speech_s = list(self.speech_s)
        other.previous = self.previous
        other.heard = self.heard
        other._names = list(self._names)
        return other

    def remove(self, k: int) -> None:
        """Speaker ``k`` gone (a sample taken back: `core.speaker_removal`); the speakers
        after it move down by one, and ``previous`` forgets it."""
        del self._sums[k], self.speech_s[k], self._names[k]
        if self.previous is not None:
            self.previous = None if self.previous == k else self.previous - (self.previous > k)

    def without_audio(self) -> Decision:
        """A final whose audio is not there (left the buffer): as a short one would be, by
        `short`, but with no embedding ("nearest" has nothing to compare: the previous)."""
        if self.config.short == "none" or self.previous is None:
            return Decision(None, 0.0)
        return Decision(self.previous, 0.0)

    def commit(self, decision: Decision, embedding: Vector, speech_s: float) -> None:
        """Apply a `decide` result: found the speaker, or count the final in (its centroid
        moves only for a confident decision with enough speech)."""
        cfg = self.config
        if decision.speaker is None:
            return
        weight = min(speech_s, cfg.max_weight_s)
        e = unit(embedding).astype(np.float64)
        if decision.new:
            if decision.speaker != len(self._sums):
                raise ValueError("a new speaker must be the next index")
            self._sums.append(e * weight)
            self.speech_s.append(speech_s)
            self._names.append(None)
        else:
            k = decision.speaker
            self.speech_s[k] += speech_s
            if decision.similarity >= cfg.update_threshold and speech_s >= cfg.min_embed_s:
                self._sums[k] = self._sums[k] + e * weight
        self.previous = decision.speaker
        self.heard = True

    def assign(self, embedding: Vector, speech_s: float) -> Decision:
        """`decide`, then `commit`."""
        d = self.decide(embedding, speech_s)
        self.commit(d, embedding, speech_s)
        return d


def mean_embedding(embeddings: Matrix, mask: npt.NDArray[np.bool_] | None = None) -> Vector:
    """The unit mean of (a subset of) window embeddings (resemblyzer's utterance embedding)."""
    rows = embeddings if mask is None else embeddings[mask]
    return unit(rows.mean(axis=0)) if len(rows) else np.zeros(embeddings.shape[1], np.float32)
