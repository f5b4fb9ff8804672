"""A stream's finals that wait together are decoded together: one encoder call for a backlog.

A final costs a full 30 s encoder call however short its audio (a shorter encoder context
costs WER: measured +16 to +26 points on held-out clips), so when a stream's next final is
submitted while its previous one still waits, unstarted, behind other work (a burst of short
replies, fast speech, another stream's finals), the two are decoded as one window: their
audio one after the other with `GAP_S` of silence between, while the whole fits in
`MAX_COALESCED_S`. A third that comes while the two still wait joins them the same way.

Exactness holds for the window decoded (speculative decoding's contract is about whatever
audio it is given: the tokens equal plain greedy ``generate`` of that window). The result is
then split back into one result per final at the word times (`split_result`): the words whose
middle falls in a final's audio, or in the half of a gap beside it, are that final's, and its
tokens are the ones that spell those words, so the parts' tokens joined are the window's
tokens, in order. Each final's submitter hears of its own result, times from its own audio's
first sample, as if it had been decoded alone.

Whisper, decoding without timestamps, often ends a window at the end of its first sentence
when a pause follows (measured: JFK's 11 s then "Mary rolled the barrel" 0.6 s later decode to
JFK's words alone). So the worker checks the cut (`complete_parts`): a final that got no words,
or whose words end more than `CUT_SHORT_S` before its audio does, is decoded again on its
own, in the same job, before anyone hears of it. No word is lost, every result stays exact
for the window it came from, and a backlog costs at worst what it cost before.

What a part cannot have of its own: ``no_speech_prob``, ``avg_logprob``, ``language`` and
``stopped_by`` are the window's (Whisper reports them per decode), and the decode's stats and
costs are the first part's (the others' are zero, so that sums stay true).

The rule that decides *when* (a stream's last waiting final, never a running one, finals kept
in order) is `runtime.job_queue`'s; this module only says *how* two jobs become one and one
result becomes several.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import numpy as np

from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.decode_types import DecodeResult, DecodeStats, JobInputs, WordTiming
from streamcap.runtime.engine import with_words
from streamcap.runtime.engine_api import InferenceEngine
from streamcap.runtime.jobs import DecodeJob, JobOutcome, Part, parts_of

log = logging.getLogger(__name__)

#: Silence between two finals' audio in the window (seconds): with it the word times, good to
#: a tenth of a second or two, put every word clearly on one side of the cut.
GAP_S = 0.6
#: The longest window a backlog is decoded as (seconds of audio and gaps): room left in the
#: model's 30 s window, and in its 224 tokens for fast speech (about 5 tokens a second).
MAX_COALESCED_S = 24.0

#: A final whose last word ends this long before its audio does was cut short by the joined
#: window's decode (a final's audio ends at most the segmenter's 0.6 s hangover after speech).
CUT_SHORT_S = 1.5

#: Text of token ids (the model's tokenizer, special tokens skipped).
Decode = Callable[[Sequence[int]], str]


def _duration(job: DecodeJob) -> float:
    return len(job.audio) / SAMPLE_RATE


def coalesce_finals(
    prev: DecodeJob,
    new: DecodeJob,
    *,
    decode: Decode,
    max_s: float = MAX_COALESCED_S,
    gap_s: float = GAP_S,
) -> DecodeJob | None:
    """One job that decodes ``prev`` (waiting, maybe coalesced already) and then ``new``, or
    None when they may not share a window: not two finals of one stream, ``new`` not of a later
    window, a shortened encoder context, or more than ``max_s`` in all.

    Pure: it reads the two jobs and builds a third (the queue calls it under its lock)."""
    if prev.kind != "final" or new.kind != "final" or prev.stream != new.stream:
        return None
    if prev.context_s is not None or new.context_s is not None:
        return None
    parts = parts_of(prev)
    last = parts[-1]
    if new.window <= last.job.window or new.parts is not None:
        return None
    offset = last.offset + last.duration + gap_s
    if offset + _duration(new) > max_s:
        return None
    parts = (*parts, Part(new, offset, _duration(new)))
    return DecodeJob(
        stream=new.stream,
        kind="final",
        window=new.window,
        audio=_window_audio(parts),
        on_done=partial(_deliver, decode=decode, gap_s=gap_s),
        options=parts[0].job.options,
        prepare=partial(_prepare, parts),
        word_timestamps=True,  # the cut needs word times, asked for or not
        clock=new.clock,
        coalescable=True,
        parts=parts,
    )


def _window_audio(parts: Sequence[Part]) -> np.ndarray:
    end = parts[-1].offset + parts[-1].duration
    audio = np.zeros(round(end * SAMPLE_RATE), dtype=np.float32)
    for p in parts:
        at = round(p.offset * SAMPLE_RATE)
        audio[at : at + len(p.job.audio)] = p.job.audio
    return audio


def _prepare(parts: Sequence[Part]) -> JobInputs:
    """The first final's options and prompt (what came before the window), and every final's
    draft one after the other (drafts only speed the decode up: any draft gives the same
    tokens)."""
    first: JobInputs | None = None
    draft: list[int] = []
    for p in parts:
        job = p.job
        inputs = (
            job.prepare()
            if job.prepare is not None
            else JobInputs(job.options, hypothesis=tuple(job.hypothesis or ()))
        )
        first = first or inputs
        draft += inputs.hypothesis or ()
    assert first is not None
    return replace(first, hypothesis=tuple(draft) or None)


def _deliver(job: DecodeJob, outcome: JobOutcome, *, decode: Decode, gap_s: float) -> None:
    """Tell each final of ``job`` its own outcome (one failing submitter stops no other),
    but for the first `JobOutcome.told` the worker told already (`complete_parts`)."""
    parts = parts_of(job)
    results: list[DecodeResult | None] = [None] * len(parts)
    if outcome.parts is not None:  # cut (and completed) by the worker
        results = list(outcome.parts)
    elif outcome.result is not None:
        spans = [(p.offset, p.duration) for p in parts]
        results = list(split_result(outcome.result, spans, gap_s, decode))
    for i in range(outcome.told, len(parts)):
        tell_part(job, outcome, i, results[i])


def tell_part(job: DecodeJob, outcome: JobOutcome, i: int, result: DecodeResult | None) -> None:
    """Tell the ``i``-th final of the coalesced ``job`` its own outcome: ``result`` (None: the
    joined decode's error or drop), the window's costs on the first final only."""
    p = parts_of(job)[i]
    own = replace(outcome, result=result, parts=None, told=0, coalesced=len(parts_of(job)))
    own.joined = job
    if i > 0:  # the decode's costs are the first part's
        own = replace(own, encoder_s=0.0, decoder_s=0.0, compute_s=0.0)
    if result is not None and not p.job.word_timestamps:
        own.result = replace(result, words=())
    try:
        p.job.on_done(p.job, own)
    except Exception:
        log.exception("on_done of a coalesced final of stream %r failed", p.job.stream)


def split_result(
    result: DecodeResult,
    spans: Sequence[tuple[float, float]],
    gap_s: float,
    decode: Decode,
) -> tuple[DecodeResult, ...]:
    """``result`` (one window holding the audio ``spans``, ``(offset, duration)`` seconds, in
    order, ``gap_s`` apart) as one result per span; see the module docstring.

    Without word times (aligning failed) nothing says where a cut falls: the first span keeps
    the whole text (no word is lost) and the others are empty."""
    n = len(spans)
    empty = replace(result, tokens=(), text="", words=(), stats=DecodeStats())
    if not result.tokens or not result.words:
        return (result, *([empty] * (n - 1)))
    cuts = [offset - gap_s / 2 for offset, _ in spans[1:]]
    groups: list[list[WordTiming]] = [[] for _ in spans]
    for w in result.words:
        middle = (w.start + w.end) / 2
        groups[sum(middle >= c for c in cuts)].append(w)
    bounds = _token_bounds(result.tokens, ["".join(w.word for w in g) for g in groups], decode)
    if bounds is None:
        log.warning("a coalesced decode's words do not spell its tokens; not split")
        return (result, *([empty] * (n - 1)))
    out = []
    for i, ((offset, duration), words) in enumerate(zip(spans, groups, strict=True)):
        tokens = result.tokens[bounds[i] : bounds[i + 1]]
        out.append(
            replace(
                result,
                tokens=tokens,
                text=decode(tokens),
                words=tuple(_shift(w, offset, duration) for w in words),
                stats=result.stats if i == 0 else DecodeStats(),
            )
        )
    return tuple(out)


def _token_bounds(tokens: Sequence[int], texts: Sequence[str], decode: Decode) -> list[int] | None:
    """Token indices where each text starts (and the end): the shortest prefix of ``tokens``
    that spells the texts so far, for each; None when no prefix does."""
    bounds = [0]
    spelled = ""
    for text in texts[:-1]:
        spelled += text
        k = bounds[-1]
        while k <= len(tokens) and decode(tokens[:k]) != spelled:
            if len(decode(tokens[:k])) > len(spelled):
                return None
            k += 1
        if k > len(tokens):
            return None
        bounds.append(k)
    bounds.append(len(tokens))
    if decode(tokens[bounds[-2] :]) != texts[-1]:
        return None
    return bounds


def _shift(w: WordTiming, offset: float, duration: float) -> WordTiming:
    start = min(max(w.start - offset, 0.0), duration)
    end = min(max(w.end - offset, start), duration)
    return WordTiming(w.word, start, end, w.probability)


def cut_short(result: DecodeResult, duration: float) -> bool:
    """Whether a part's result misses speech it should have: no words, or words that end
    more than `CUT_SHORT_S` before its audio does."""
    if not result.words:
        return True
    return result.words[-1].end < duration - CUT_SHORT_S


def complete_parts(
    engine: InferenceEngine,
    job: DecodeJob,
    result: DecodeResult,
    *,
    gap_s: float = GAP_S,
    tell_first: Callable[[Sequence[DecodeResult]], None] | None = None,
) -> tuple[DecodeResult, ...]:
    """The results of a coalesced ``job``'s finals: its window's ``result`` cut per final, and
    each final the window's decode cut short decoded again alone (its own options and draft),
    exact for its own audio.

    ``tell_first`` hears the finals before the first one cut short, before that one is decoded
    again: a final the joined decode completed never waits for a later one's second decode
    (waiting cost the hard file's p95 1.3 s: the README's measurement). Finals stay in order:
    the ones after a cut-short final are told with it, at the end."""
    parts = parts_of(job)
    spans = [(p.offset, p.duration) for p in parts]
    out = list(split_result(result, spans, gap_s, engine.ids_to_text))
    short = [cut_short(out[i], p.duration) for i, p in enumerate(parts)]
    first_short = short.index(True) if True in short else len(parts)
    if tell_first is not None and 0 < first_short < len(parts):
        tell_first(out[:first_short])
    for i, p in enumerate(parts):
        if not short[i]:
            continue
        options, hypothesis = p.job.prepared(engine)
        encoded = engine.encode(p.job.audio)
        alone = engine.decode(encoded, options, hypothesis=hypothesis)
        alone = with_words(engine, encoded, options, alone)
        stats = out[i].stats + alone.stats
        out[i] = replace(alone, stats=stats)
        log.debug("stream %s: final of window %d decoded again alone", job.stream, p.job.window)
    return tuple(out)
