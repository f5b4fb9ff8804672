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
- A pause that reaches `early_final_s` starts the window's exact final at once (an early
  final); if the pause lasts, that decode is the window's final, and if voice comes first it is
  void (`on_tick`).

What happens in which order is three state machines, in tables (`policy_states`): a window's
life (OPEN, EARLY_FINAL, EARLY_FINAL_READY, CLOSED, DONE), its partial decode (IDLE, PENDING)
and the stream's speech (SILENCE, SPEECH); an event a table does not allow raises. This class
decides when; what a partial or a final says is `policy_text.CaptionText`'s.
"""

from __future__ import annotations

from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.decode_types import DecodeResult
from streamcap.core.policy_config import (
    PolicyConfig,
    RequestKind,
)
from streamcap.core.policy_states import (
    PartialEvent,
    PartialState,
    SpeechEvent,
    SpeechState,
    WindowEvent,
    WindowState,
    speech_machine,
)
from streamcap.core.policy_text import CaptionText, tail_words
from streamcap.core.policy_window import (
    DecodeInputs,
    DecodeRequest,
    DroppedFinal,
    Step,
    Window,
)
from streamcap.core.segmenter import Event, SpeechAudio, SpeechEnd, SpeechStart

__all__ = ["CaptionPolicy"]

_EARLY = (WindowState.EARLY_FINAL, WindowState.EARLY_FINAL_READY)  # an early final is valid


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
        self._text = CaptionText(self.config)  # what is said: partials, finals, segments
        self._done_until = 0.0  # stream seconds up to which audio has been finalised
        self._have_until = 0.0  # ... or is held by the open window (after a split)
        self._utterance = 0  # counts utterances the segmenter ended (not at a length split)
        self._speech = speech_machine()  # between the segmenter's SpeechStart and SpeechEnd
        #: early finals started, used as the window's final, and voided (voice, a commit's cut)
        self.early_finals = {"started": 0, "used": 0, "voided": 0}
        self._early = True  # early finals allowed (the runtime's last word, `on_tick`)
        #: the partial interval's multiplier (None: no partials) and whether a partial may
        #: start while a final is not back: the stream's load shedding (`core.load_shed`)
        self._pace: float | None = 1.0
        self._partial_beside_final = True
        #: voiced windows whose final ended with no text, by reason (`DroppedFinal.reason`)
        self.drops: dict[str, int] = self._text.drops

    # ------------------------------------------------------------------ inputs

    def set_pace(self, scale: float | None, beside_final: bool = True) -> None:
        """Partials every ``scale`` times `partial_interval_s` (None: none at all), and, unless
        ``beside_final``, none while a final of the stream is not back: what the stream's load
        shedding asks when it falls behind (`core.load_shed`). Finals are never paced."""
        self._pace = scale
        self._partial_beside_final = beside_final

    def on_event(self, event: Event, now: float | None = None) -> Step:
        """A segmenter event; `now` is stream time on the clock (default: the event's end)."""
        step = Step()
        if isinstance(event, SpeechStart):
            self._speech.fire(SpeechEvent.START)
        elif isinstance(event, SpeechAudio):
            self._speech.fire(SpeechEvent.AUDIO)
            self._on_audio(event, step)
            self._maybe_partial(step)
            w = self._window
            if w is not None and w.duration >= self.config.max_window_s:
                self._close(w, step, event.end if now is None else now)
        elif isinstance(event, SpeechEnd):
            self._speech.fire(SpeechEvent.END)
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
            w.state.fire(WindowEvent.EARLY_FINAL)
            w.early = self._request("final", w)
            self.early_finals["started"] += 1
            step.requests.append(w.early)
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
                w.state.fire(WindowEvent.FINAL_RESULT)
                self._text.final(w, result, now, step)
            elif self._window is not None and self._window.early is request:
                self._window.state.fire(WindowEvent.EARLY_RESULT)  # kept until the pause lasts
                self._window.early_result = result
        else:
            w = self._find(request.window)
            if w is not None:  # (a window that is done takes no partial)
                w.partial.fire(PartialEvent.RESULT)
                if result is not None:
                    w.hypothesis = result.tokens
                    if w.state.state is not WindowState.CLOSED:
                        self._on_partial(w, request, result, now, step)
        self._maybe_partial(step)
        return step

    def finish(self, now: float | None = None) -> Step:
        """End of stream (after the segmenter's flush events): close what is open."""
        step = Step()
        if self._window is not None:
            self._close(self._window, step, self._window.end if now is None else now)
        self._speech.fire(SpeechEvent.FINISH)
        return step

    def prepare(self, request: DecodeRequest) -> DecodeInputs:
        """Prompt and hypothesis for `request`, as of now."""
        w = self._find(request.window)
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
            prompt = tail_words(self.committed_text, self.config.short_prompt_chars)
        return DecodeInputs(prompt, hyp)

    def take_drops(self) -> list[DroppedFinal]:
        """The finals dropped since the last call (for the runtime's log), oldest first."""
        return self._text.take_drops()

    # ------------------------------------------------------------------ queries

    @property
    def in_speech(self) -> bool:
        """Between the segmenter's `SpeechStart` and `SpeechEnd` (or `finish`)."""
        return self._speech.state is SpeechState.SPEECH

    @property
    def committed_text(self) -> str:
        return self._text.committed_text

    def prompt_text(self, utterance: int | None = None) -> str:
        """The prompt for a decode of `utterance` (see `PolicyConfig.prompt_scope`)."""
        return self._text.prompt_text(utterance)

    # ------------------------------------------------------------------ internals

    def _finals_out(self) -> bool:
        """Whether a final decode this policy asked for has not come back."""
        return any(r.kind == "final" for r in self._requests.values())

    def _find(self, window: int) -> Window | None:
        """The open window or a closed one awaiting its final, by id."""
        w = self._window
        return w if w is not None and w.id == window else self._closed.get(window)

    def _request(self, kind: RequestKind, w: Window) -> DecodeRequest:
        words = kind == "final" or (self.config.cut_at_commits and self._text.may_commit(w))
        req = DecodeRequest(self._next_id, kind, w.id, w.audio(), w.start, w.end, words)
        self._next_id += 1
        self._requests[req.id] = req
        return req

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
            seg = self._text.new_segment()
            w = Window(self._next_window, start, seg, start, self._utterance, voice_end=start)
            self._next_window += 1
            self._window = w
        w.append(samples)
        end = start + len(samples) / SAMPLE_RATE
        if ev.silent_tail < end - start - 1e-6:  # voice in this piece
            w.voice_end = max(w.voice_end, end - ev.silent_tail)
            early = w.early
            if w.state.state in _EARLY and early is not None and w.voice_end > early.end + 1e-6:
                self._void_early(w, WindowEvent.VOICE)

    def _early_final_due(self, w: Window) -> bool:
        x = self.config.early_final_s
        return x is not None and w.state.state is WindowState.OPEN and w.silence >= x - 1e-6

    def _void_early(self, w: Window, why: WindowEvent) -> None:
        """Speech resumed after an early final started, or a commit cut the audio it decoded:
        the window goes on, its result is dropped (but drafts the next decode: it is the
        window's hypothesis so far)."""
        req = w.early
        assert req is not None
        ready = w.state.state is WindowState.EARLY_FINAL_READY
        if self._requests.pop(req.id, None) is not None or ready:
            self.early_finals["voided"] += 1
        if ready and w.early_result is not None:
            w.hypothesis = w.early_result.tokens
        w.state.fire(why)
        w.early = None
        w.early_result = None

    def _maybe_partial(self, step: Step) -> None:
        w = self._window
        if w is None or w.partial.state is PartialState.PENDING or self._closed:
            return  # a closed window's final comes first (its text is the prompt)
        if self._pace is None:
            return  # the stream is far behind: finals only
        if not self._partial_beside_final and self._finals_out():
            return  # behind: a partial now would only delay the final being decoded
        cfg = self.config
        if w.state.state is not WindowState.OPEN:
            return  # in a pause, its final under way: a partial would only delay it
        x = cfg.early_final_s
        if self._early and x is not None and w.silence >= x / 2 - 1e-6:
            return  # a pause may be beginning: wait a frame or two for its early final
        new = (w.n - w.last_partial_n) / SAMPLE_RATE
        need = cfg.partial_interval_s
        if w.last_partial_n == 0 and cfg.first_partial_s is not None:
            need = cfg.first_partial_s
        need *= self._pace
        if new + 1e-9 >= need:
            req = self._request("partial", w)
            w.partial.fire(PartialEvent.REQUEST)
            w.last_partial_n = w.n
            step.requests.append(req)

    def _on_partial(
        self, w: Window, req: DecodeRequest, result: DecodeResult, now: float, step: Step
    ) -> None:
        """Its text (`CaptionText.partial`). A commit that cut the window voids an early final
        of it: that decode's audio holds what is now committed."""
        if self._text.partial(w, req, result, now, step) and w.state.state in _EARLY:
            self._void_early(w, WindowEvent.COMMIT_CUT)

    def _close(self, w: Window, step: Step, now: float) -> None:
        """Finish window `w`: its early final if one is valid (the window is cut where that
        decode's audio ends: what follows is unvoiced), else request its exact final decode."""
        was = w.state.state
        w.state.fire(WindowEvent.CLOSE)
        self._window = None
        self._done_until = max(self._done_until, w.end)
        if was is WindowState.OPEN:
            self._closed[w.id] = w
            step.requests.append(self._request("final", w))
            return
        self.early_finals["used"] += 1
        assert w.early is not None
        w.cut(w.early.end)
        if w.state.state is WindowState.DONE:  # its result had come
            self._text.final(w, w.early_result, now, step)
        else:
            self._closed[w.id] = w
