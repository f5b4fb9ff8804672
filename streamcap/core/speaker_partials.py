"""When a partial may carry a speaker's name: the rule the labeller applies to the partial on
screen (`runtime.labeller.SpeakerLabeller`, its windows kept by `runtime.partial_names`).
Pure (numpy only). Its own module beside `core.speakers` (the meeting's tracker, whose
thresholds, `SpeakerConfig.name_partials` and `partial_*`, it reads): a name on the words being
spoken is read at once, so it has its own, stricter rule (issue 37, item 1).
"""

from __future__ import annotations

import numpy as np

from streamcap.core.speakers import (
    Decision,
    Matrix,
    SpeakerConfig,
    SpeakerTracker,
    mean_embedding,
    unit,
)

__all__ = ["name_partial", "partial_least_s"]


def partial_least_s(cfg: SpeakerConfig) -> float:
    """The least audio (seconds) a partial may be named from: `partial_short_min_s` where
    the model is calibrated for spans shorter than a window (`partial_short_threshold`),
    else `partial_min_s`."""
    if cfg.partial_short_threshold is None:
        return cfg.partial_min_s
    return min(cfg.partial_short_min_s, cfg.partial_min_s)


def name_partial(
    tracker: SpeakerTracker, windows: Matrix, span_s: float, halves: bool = True
) -> Decision:
    """Who speaks a partial (its window embeddings so far, over ``span_s`` seconds of audio),
    or nobody (``Decision(None, similarity)``): a partial is named only when its voice is
    *confidently known*, since a name on the words being spoken is read at once and a wrong
    one is worse than none. Nothing changes in ``tracker`` (a partial's audio is its final's,
    which counts once, when labelled).

    Named when all hold: at least `partial_min_s` of audio; a known speaker whose centroid is
    at least `partial_threshold` similar to the windows' unit mean, and at least
    `partial_margin` above the next one; and (``halves``, with two windows or more) the first
    and second half of the windows are no less similar than `split_threshold`, i.e. no change
    of voice is seen inside the partial (its words would belong to two people). A voice never
    heard has no centroid near enough: unnamed until its final founds its label.

    A shorter span (an utterance's first partial, about 1 s) is named only where the model is
    calibrated for it (`partial_short_threshold` set: CAM++): from `partial_short_min_s` of
    audio, at that stricter threshold (a short embedding is noisier, and a never-heard voice
    lies nearer a known one), the same margin; ``windows`` is then the one short window of
    all its audio (`runtime.partial_names`), so there are no halves to compare."""
    cfg = tracker.config
    if not cfg.name_partials or span_s < partial_least_s(cfg) or len(tracker) == 0:
        return Decision(None, 0.0)
    if len(windows) == 0:
        return Decision(None, 0.0)
    sims = tracker.similarities(mean_embedding(windows))
    order = np.argsort(-sims)
    best = int(order[0])
    best_sim = float(sims[best])
    second = float(sims[order[1]]) if len(order) > 1 else -1.0
    threshold = cfg.partial_threshold
    if span_s < cfg.partial_min_s and cfg.partial_short_threshold is not None:
        threshold = cfg.partial_short_threshold  # a short span (see partial_least_s)
    if best_sim < threshold or best_sim - second < cfg.partial_margin:
        return Decision(None, best_sim)
    if halves and len(windows) >= 2:
        k = len(windows) // 2
        if float(unit(windows[:k].mean(axis=0)) @ unit(windows[k:].mean(axis=0))) < (
            cfg.split_threshold
        ):
            return Decision(None, best_sim)
    return Decision(best, best_sim)
