"""Caption policy: when to decode, what to commit, what to show. Pure logic, clock passed in.

One `CaptionPolicy` per stream consumes segmenter events and decode results and answers with
decode requests and caption events (not numbered: the sink's `CaptionLog` owns the sequence).
No threads, no model, no clock of its own: tests replay hours of audio in seconds.

How an utterance becomes captions:
- The open utterance's audio is the current *window*. Every `partial_interval_s` of new audio
  a partial decode of the whole window is requested (the worker may use a shortened encoder
  context for it). Its text is shown as a partial; the previous partial's tokens are the
  hypothesis the decoder drafts from.
- Words on which `agreement` consecutive partials agree are *locked* (LocalAgreement): they are
  shown as stable (a partial's `committed_chars` counts its locked prefix) and, at a sentence
  end (`text.ends_sentence`: not after "Mr." or "e.g.") or once `max_locked_chars` wait,
  emitted as a final for part of the utterance, so a long monologue does not hold its text
  back until it ends. The window is then cut at the committed words' end (word times of the
  partial that locked them), and the rest is decoded on its own audio: nothing is decoded
  twice, or lost to an alignment of two decodes.
- What a partial shows of its unlocked tail: the words the previous partial agreed on plus
  `lead_words` more, less `holdback_words` at the end; words that only change case or
  punctuation keep the form on screen (`keep_screen_form`, `display.keep_form`). Measured on
  lf3: flicker 7.5 -> 3.4 at the same first-partial latency.
- When the delivered audio stops (the segmenter holds silence back once it is longer than its
  tail) for `pause_final_s`, the window is closed at that point and decoded exactly, with the
  model's standard 30 s input: the same audio the final would get if the utterance ended there.
  If speech resumes, the next window starts at the cut (which lies in silence). At `SpeechEnd`
  the window is closed likewise. A closed window's final is its exact decode after the words
  already emitted from it (`exact_finals`); a final is never revised.
- Hallucination guards (``text.py``): no-speech probability with average
  log-probability, known silence phrases only when no-speech is also high, repetition loops
  trimmed to one copy. A voiced window whose final ends with no text is never lost silently:
  it is counted by reason (`CaptionPolicy.drops`, `text.drop_reason`, or "not_decoded" when
  the worker gave no result) and recorded for the runtime's log (`take_drops`).
"""

from __future__ import annotations

from dataclasses import dataclass

from streamcap.core.captions import CaptionEvent
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.cuts import cut_after, timings_for
from streamcap.core.display import keep_form
from streamcap.core.policy_config import (
    PARTIAL_CONTEXT_MARGIN_S,
    PARTIAL_CONTEXT_MIN_S,
    PolicyConfig,
    RequestKind,
)
from streamcap.core.policy_window import DecodeInputs, DecodeRequest, Step, Window
from streamcap.core.segmenter import Event, SpeechAudio, SpeechEnd, SpeechStart
from streamcap.core.text import (
    align_prefix,
    common_prefix,
    drop_reason,
    ends_sentence,
    result_words,
)
from streamcap.decoding.options import DecodeResult, WordTiming

__all__ = [
    "PARTIAL_CONTEXT_MARGIN_S",
    "PARTIAL_CONTEXT_MIN_S",
    "CaptionPolicy",
    "DecodeInputs",
    "DroppedFinal",
    "DecodeRequest",
    "PolicyConfig",
    "RequestKind",
    "Step",
]


#: A closed window's final decode that the worker never delivered (dropped or failed).
NOT_DECODED = "not_decoded"


@dataclass(frozen=True)
class DroppedFinal:
    """A voiced window whose final came out with no text: segment, stream seconds, why, and
    the decode (None when there was none)."""

    segment: int
    start: float
    end: float
    reason: str
    result: DecodeResult | None


class CaptionPolicy:
    """Per-stream partial/final decisions and text stabilisation (see the module docstring).

    Inputs: `on_event` (segmenter events), `on_tick` (the segmenter's analysed time, after each
    push), `on_result` (a decode result, or None when the worker dropped the request), `finish`.
    Each returns a `Step`. `now` is stream time (seconds since the stream's first sample on
    the clock), used for `latency_ms`. `prepare` gives a request's prompt and hypothesis when
    the worker starts it, so they reflect every result delivered before.
    """

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        self._window: Window | None = None
        self._closed: dict[int, Window] = {}  # windows whose final decode is outstanding
        self._requests: dict[int, DecodeRequest] = {}
        self._next_id = 1
        self._next_window = 1
        self._next_segment = 1
        self._done_until = 0.0  # stream seconds up to which audio has been finalised
        self._have_until = 0.0  # ... or is held by the open window (after a split)
        self._finals_text: list[str] = []
        self._utterance = 0  # counts utterances the segmenter ended (not at a length split)
        self._utterance_text: dict[int, list[str]] = {}  # finals of recent utterances
        self.in_speech = False
        #: early finals started, used as the window's final, and voided by speech resuming
        self.early_finals = {"started": 0, "used": 0, "voided": 0}
        self._early = True  # early finals allowed (the runtime's last word, `on_tick`)
        #: voiced windows whose final ended with no text, by reason (`DroppedFinal.reason`)
        self.drops: dict[str, int] = {}
        self._dropped: list[DroppedFinal] = []

    # ------------------------------------------------------------------ inputs

    def on_event(self, event: Event, now: float | None = None) -> Step:
        """A segmenter event; `now` is stream time on the clock (default: the event's end)."""
        step = Step()
        if isinstance(event, SpeechStart):
            self.in_speech = True
        elif isinstance(event, SpeechAudio):
            self._on_audio(event, step)
            self._maybe_partial(step)
            w = self._window
            if w is not None and w.duration >= self.config.max_window_s:
                self._close(w, step, event.end if now is None else now)
        elif isinstance(event, SpeechEnd):
            self.in_speech = False
            w = self._window
            if w is not None:
                if event.reason == "max_length" and event.end <= min(w.first_end, w.end - 1e-3):
                    # A split in the pause before this window's speech (the window began with
                    # the silence the segmenter held back, sent in one piece when speech
                    # resumed): its audio comes again as the next utterance. Keep the window
                    # and skip what it already holds, rather than decode a silent window.
                    self._have_until = max(self._have_until, w.end)
                    return step
                else:
                    w.cut(event.end)
                    self._close(w, step, event.end if now is None else now)
            self._done_until = max(self._done_until, event.end)
            if event.reason != "max_length":  # a split monologue goes on in its context
                self._utterance += 1
        return step

    def on_tick(self, stream_time: float, now: float | None = None, early: bool = True) -> Step:
        """The segmenter has analysed audio up to `stream_time`: detect a pause in speech.

        A pause that reaches `early_final_s` of unvoiced audio starts the window's exact final
        decode at once (tentatively); one that lasts `pause_final_s` beyond the segmenter's
        tail closes the window, with that decode as its final if no voice came in between.
        `now` is stream time on the clock (default `stream_time`), for a final ready at once;
        `early` False holds early finals back (the runtime's choice: `LiveConfig.early_finals`).
        """
        step = Step()
        self._early = early
        w = self._window
        if w is None or not self.in_speech or w.n == 0:
            return step
        if early and self._early_final_due(w) and w.voice_end > w.start:  # voice to decode
            w.tentative = self._request("final", w)
            self.early_finals["started"] += 1
            step.requests.append(w.tentative)
        pause = self.config.pause_final_s
        # stream_time moves in whole frames: allow for rounding
        if pause is not None and stream_time - w.end >= pause + 1e-3:
            self._close(w, step, stream_time if now is None else now)
        return step

    def on_result(self, request: DecodeRequest, result: DecodeResult | None, now: float) -> Step:
        step = Step()
        if self._requests.pop(request.id, None) is None:
            return step
        if request.kind == "final":
            w = self._closed.pop(request.window, None)
            if w is not None:
                self._finalise(w, result, now, step)
            elif self._window is not None and self._window.tentative is request:
                self._window.tentative_done = True  # kept until the pause is confirmed
                self._window.tentative_result = result
        else:
            w = self._window if self._window and self._window.id == request.window else None
            w = w or self._closed.get(request.window)
            if w is not None and w.partial_pending == request.id:
                w.partial_pending = None
                if result is not None:
                    w.hypothesis = result.tokens
                    if not w.closed:
                        self._on_partial(w, request, result, now, step)
        self._maybe_partial(step)
        return step

    def finish(self, now: float | None = None) -> Step:
        """End of stream (after the segmenter's flush events): close what is open."""
        step = Step()
        if self._window is not None:
            self._close(self._window, step, self._window.end if now is None else now)
        self.in_speech = False
        return step

    def prepare(self, request: DecodeRequest) -> DecodeInputs:
        """Prompt and hypothesis for `request`, as of now."""
        w = self._window if self._window and self._window.id == request.window else None
        w = w or self._closed.get(request.window)
        hyp = w.hypothesis if w is not None else None
        prompt = self.prompt_text(w.utterance if w is not None else None)
        short = self.config.short_prompt_s
        if (
            not prompt
            and short is not None
            and request.kind == "final"
            and w is not None
            and w.voice_end - w.start < short
        ):  # a short reply: the sentence before is its context (`PolicyConfig.short_prompt_s`)
            prompt = _tail(self.committed_text, self.config.short_prompt_chars)
        return DecodeInputs(prompt, hyp)

    def take_drops(self) -> list[DroppedFinal]:
        """The finals dropped since the last call (for the runtime's log), oldest first."""
        out, self._dropped = self._dropped, []
        return out

    # ------------------------------------------------------------------ queries

    @property
    def committed_text(self) -> str:
        return " ".join(t for t in self._finals_text if t)

    def prompt_text(self, utterance: int | None = None) -> str:
        """The prompt for a decode of `utterance` (see `PolicyConfig.prompt_scope`)."""
        n = self.config.prompt_chars
        if n <= 0:
            return ""
        text = self.committed_text
        if self.config.prompt_scope == "utterance":
            said = self._utterance_text.get(utterance, []) if utterance is not None else []
            text = " ".join(said)
        return _tail(text, n)

    # ------------------------------------------------------------------ internals

    def _request(self, kind: RequestKind, w: Window) -> DecodeRequest:
        words = kind == "final" or (self.config.cut_at_commits and self._may_commit(w))
        req = DecodeRequest(self._next_id, kind, w.id, w.audio(), w.start, w.end, words)
        self._next_id += 1
        self._requests[req.id] = req
        return req

    def _may_commit(self, w: Window) -> bool:
        """Whether the next partial of `w` may lock words to send as a final: the last one
        had a sentence end or enough words past what is sent. Only such partials are aligned
        (word times cost a decoder pass)."""
        cfg = self.config
        ahead = w.locked[w.emitted :] + (w.history[-1] if w.history else [])
        if not ahead:
            return False
        if cfg.commit_sentences and any(ends_sentence(x) for x in ahead):
            return True
        return len(" ".join(ahead)) >= cfg.max_locked_chars

    def _on_audio(self, ev: SpeechAudio, step: Step) -> None:
        samples = ev.samples
        start = ev.start
        have = max(self._done_until, self._have_until)
        if ev.end <= have:
            return
        if start < have:  # sent again after a split: keep only what is new
            skip = round((have - start) * SAMPLE_RATE)
            samples = samples[skip:]
            start = start + skip / SAMPLE_RATE
        w = self._window
        if w is None:
            seg = self._next_segment
            self._next_segment += 1
            w = Window(self._next_window, start, seg, start, self._utterance, voice_end=start)
            self._next_window += 1
            self._window = w
        w.append(samples)
        end = start + len(samples) / SAMPLE_RATE
        if ev.silent_tail < end - start - 1e-6:  # voice in this piece
            w.voice_end = max(w.voice_end, end - ev.silent_tail)
            if w.tentative is not None and w.voice_end > w.tentative.end + 1e-6:
                self._void_tentative(w)

    def _early_final_due(self, w: Window) -> bool:
        x = self.config.early_final_s
        return x is not None and w.tentative is None and w.silence >= x - 1e-6

    def _void_tentative(self, w: Window) -> None:
        """Speech resumed after an early final started: the window goes on, its result is
        dropped (but drafts the next decode: it is the window's hypothesis so far)."""
        req = w.tentative
        assert req is not None
        if self._requests.pop(req.id, None) is not None or w.tentative_done:
            self.early_finals["voided"] += 1
        if w.tentative_done and w.tentative_result is not None:
            w.hypothesis = w.tentative_result.tokens
        w.tentative = None
        w.tentative_done = False
        w.tentative_result = None

    def _maybe_partial(self, step: Step) -> None:
        w = self._window
        if w is None or w.closed or w.partial_pending is not None or self._closed:
            return  # a closed window's final comes first (its text is the prompt)
        cfg = self.config
        if w.tentative is not None:
            return  # in a pause, its final under way: a partial would only delay it
        x = cfg.early_final_s
        if self._early and x is not None and w.silence >= x / 2 - 1e-6:
            return  # a pause may be beginning: wait a frame or two for its early final
        new = (w.n - w.last_partial_n) / SAMPLE_RATE
        need = cfg.partial_interval_s
        if w.last_partial_n == 0 and cfg.first_partial_s is not None:
            need = cfg.first_partial_s
        if new + 1e-9 >= need:
            req = self._request("partial", w)
            w.partial_pending = req.id
            w.last_partial_n = w.n
            step.requests.append(req)

    def _close(self, w: Window, step: Step, now: float) -> None:
        """Finish window `w`: its early final if one is valid (the window is cut where that
        decode's audio ends: what follows is unvoiced), else request its exact final decode."""
        w.closed = True
        self._window = None
        self._done_until = max(self._done_until, w.end)
        tent = w.tentative
        if tent is None:
            self._closed[w.id] = w
            step.requests.append(self._request("final", w))
            return
        self.early_finals["used"] += 1
        w.cut(tent.end)
        if w.tentative_done:
            self._finalise(w, w.tentative_result, now, step)
        else:
            self._closed[w.id] = w

    def _on_partial(
        self, w: Window, req: DecodeRequest, result: DecodeResult, now: float, step: Step
    ) -> None:
        cfg = self.config
        words = result_words(result, cfg.guard, partial=True)
        tail = words[align_prefix(w.locked, words) :]
        if cfg.agreement:
            w.history = [*w.history[-(cfg.agreement - 1) :], tail]
            w.history_end = [*w.history_end[-(cfg.agreement - 1) :], req.end]
            if len(w.history) == cfg.agreement:
                n = min(common_prefix(w.history[0], h) for h in w.history[1:])
                if cfg.lock_margin:  # a partial's last words may be cut mid-word: not yet
                    n = min([n] + [len(h) - cfg.lock_margin for h in w.history])
                if n:
                    w.locked += tail[:n]
                    w.locked_end = w.history_end[0]
                    w.history = [h[n:] for h in w.history]
                    tail = tail[n:]
        self._emit_locked(w, now, step, req, words, timings_for(result, words))
        pending = w.locked[w.emitted :]
        shown = tail[: max(min(1, len(tail)), len(tail) - cfg.holdback_words)]
        if cfg.lead_words is not None and len(w.history) >= 2 and w.screen:
            agreed = common_prefix(w.history[-2], w.history[-1])
            shown = shown[: agreed + cfg.lead_words]
        if shown and cfg.trim_partial_punct:
            last = shown[-1].rstrip(".,?!;:\u3002\uff1f\uff01\u2026")
            shown = shown[:-1] + [last] if last else shown[:-1]
        text = self._display(" ".join(pending + shown))
        if cfg.keep_screen_form and w.screen and text:
            text = " ".join(keep_form(w.screen, text.split()))
        if text or w.shown:
            committed = len(" ".join(text.split()[: len(pending)]))
            step.captions.append(
                CaptionEvent(
                    "partial", w.segment, text, w.seg_start, req.end, committed,
                    _latency_ms(now, req.end),
                )
            )  # fmt: skip
            w.shown = bool(text)
            w.screen = text.split()

    def _emit_locked(
        self,
        w: Window,
        now: float,
        step: Step,
        req: DecodeRequest,
        words: list[str],
        timings: list[WordTiming] | None,
    ) -> None:
        """Send locked words as a final at the last sentence end, or when too many wait.

        `words` is the partial that locked them, `timings` its word times (or None): with
        `cut_at_commits` the window is then cut between the last committed word and the next.
        """
        cfg = self.config
        pending = w.locked[w.emitted :]
        if not pending:
            return
        cut = 0
        if cfg.commit_sentences:
            for i, word in enumerate(pending):
                if ends_sentence(word, pending[i + 1] if i + 1 < len(pending) else None):
                    cut = i + 1
        if cut == 0 and len(" ".join(pending)) >= cfg.max_locked_chars:
            cut = len(pending)
        if cut == 0:
            return
        text = " ".join(pending[:cut])
        if cfg.keep_screen_form and w.screen:  # as the partials showed them
            text = " ".join(keep_form(w.screen, pending[:cut]))
        end = w.locked_end  # no word times: the audio end of the partial that first had them
        boundary = None
        committed: tuple[WordTiming, ...] = ()
        if cfg.cut_at_commits and timings is not None:
            j = align_prefix(w.locked[: w.emitted + cut], words)
            if 0 < j <= len(timings):
                boundary = cut_after(timings, j, req.end - req.start)
                end = req.start + timings[j - 1].end
                committed = tuple(t.shifted(req.start) for t in timings[:j])
        self._emit_final(w, text, w.seg_start, end, now, step, committed)
        if boundary is not None:  # the rest of the utterance is a window of its own
            if w.tentative is not None:  # its early final decoded what is now committed
                self._void_tentative(w)
            w.drop_before(req.start + boundary)
            w.locked = w.locked[w.emitted + cut :]
            w.emitted = 0
            end = w.start
        else:
            w.emitted += cut
        w.segment = self._next_segment
        self._next_segment += 1
        w.seg_start = end
        w.shown = False
        w.screen = []

    def _finalise(self, w: Window, result: DecodeResult | None, now: float, step: Step) -> None:
        words = result_words(result, self.config.guard) if result is not None else []
        if self.config.exact_finals:  # the exact decode, after the words already sent
            rest = words[align_prefix(w.locked[: w.emitted], words) :]
            shown = w.locked[w.emitted :]
            if self.config.keep_screen_form and common_prefix(w.screen, shown) == len(shown):
                shown = w.screen
            text = " ".join(keep_form(shown, rest))  # keep words as they were shown
        else:  # locked words stand, the exact decode adds what follows them
            rest = words[align_prefix(w.locked, words) :] if words else []
            text = " ".join(w.locked[w.emitted :] + rest)
        if not text and w.voice_end > w.start:  # voiced audio that says nothing: why
            reason = NOT_DECODED if result is None else drop_reason(result, self.config.guard)
            if reason is not None:  # (else all it said was sent before: nothing is lost)
                self.drops[reason] = self.drops.get(reason, 0) + 1
                self._dropped.append(DroppedFinal(w.segment, w.seg_start, w.end, reason, result))
        if text or w.shown:  # an empty final clears a partial left on screen
            timed = timings_for(result, words) if result is not None else None
            spoken: tuple[WordTiming, ...] = ()
            if timed and self.config.exact_finals:  # the times of `rest`, in stream time
                spoken = tuple(t.shifted(w.start) for t in timed[len(words) - len(rest) :])
            self._emit_final(w, text, w.seg_start, w.end, now, step, spoken)

    def _display(self, text: str) -> str:
        if not text or not self.config.capitalize:
            return text
        last = self._finals_text[-1] if self._finals_text else ""
        if last and not ends_sentence(last.split()[-1]):
            return text
        return text[0].upper() + text[1:]

    def _emit_final(
        self,
        w: Window,
        text: str,
        start: float,
        end: float,
        now: float,
        step: Step,
        words: tuple[WordTiming, ...] = (),
    ) -> None:
        text = self._display(text)
        if words and len(words) == len(text.split()):  # the shown spelling, the decode's times
            words = tuple(
                WordTiming(shown, t.start, t.end, t.probability)
                for shown, t in zip(text.split(), words, strict=True)
            )
        else:
            words = ()
        step.captions.append(
            CaptionEvent(
                "final", w.segment, text, start, end, len(text), _latency_ms(now, end), words
            )
        )
        if text:
            self._finals_text.append(text)
            self._utterance_text.setdefault(w.utterance, []).append(text)
            for old in [u for u in self._utterance_text if u < w.utterance - 1]:
                del self._utterance_text[old]


def _latency_ms(now: float, end: float) -> float:
    return max(0.0, (now - end) * 1000.0)


def _tail(text: str, n: int) -> str:
    """The last `n` characters of `text`, from a word's start (0: nothing)."""
    if n <= 0:
        return ""
    if len(text) <= n:
        return text
    cut = text[-n:]
    if text[-n - 1] == " ":  # the cut falls between words
        return cut
    space = cut.find(" ")
    return cut[space + 1 :] if 0 <= space < len(cut) - 1 else cut
