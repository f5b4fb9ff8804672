"""What the caption policy says: a partial's text, commits of locked words, a window's final.

`CaptionPolicy` (policy.py) decides *when*: which window, which decode, in which state
(`policy_states`). `CaptionText` decides *what*, from a window's data and a decode's words:
LocalAgreement locking, the part of a partial's tail that is shown, the sentence end where
locked words are sent as a final (and where the window's audio is then cut), a closed window's
final text, and the finals so far (the prompt of later decodes, the case of the next caption).
The rules themselves are described in policy.py's module docstring and `PolicyConfig`.
"""

from __future__ import annotations

from streamcap.core.captions import CaptionEvent
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.crosstalk_measures import speech_level_db
from streamcap.core.cuts import cut_after, timings_for
from streamcap.core.decode_types import DecodeResult, WordTiming
from streamcap.core.display import keep_form
from streamcap.core.policy_config import PolicyConfig
from streamcap.core.policy_window import NOT_DECODED, DecodeRequest, DroppedFinal, Step, Window
from streamcap.core.text import (
    align_prefix,
    common_prefix,
    drop_reason,
    ends_sentence,
    result_words,
)


class CaptionText:
    """The text side of one stream's policy: segments, partials, finals, dropped finals."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self._next_segment = 1
        self._finals: list[str] = []
        self._by_utterance: dict[int, list[str]] = {}  # finals of the last two utterances
        #: voiced windows whose final ended with no text, by reason (`DroppedFinal.reason`)
        self.drops: dict[str, int] = {}
        self._dropped: list[DroppedFinal] = []

    @property
    def committed_text(self) -> str:
        return " ".join(t for t in self._finals if t)

    def prompt_text(self, utterance: int | None = None) -> str:
        """The prompt for a decode of `utterance` (see `PolicyConfig.prompt_scope`)."""
        n = self.config.prompt_chars
        if n <= 0:
            return ""
        text = self.committed_text
        if self.config.prompt_scope == "utterance":
            said = self._by_utterance.get(utterance, []) if utterance is not None else []
            text = " ".join(said)
        return tail_words(text, n)

    def new_segment(self) -> int:
        """The caption segment the next window's (or a window's next) text belongs to."""
        self._next_segment += 1
        return self._next_segment - 1

    def take_drops(self) -> list[DroppedFinal]:
        out, self._dropped = self._dropped, []
        return out

    def may_commit(self, w: Window) -> bool:
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

    def partial(
        self, w: Window, req: DecodeRequest, result: DecodeResult, now: float, step: Step
    ) -> bool:
        """A partial of the open window `w`: lock what partials agree on, send what is locked
        at a sentence end as a final, show the rest. True when that commit cut the window's
        audio (an early final of it decoded what is now committed: void)."""
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
        cut = self._commit(w, now, step, req, words, timings_for(result, words))
        pending = w.locked[w.emitted :]
        shown = tail[: max(min(1, len(tail)), len(tail) - cfg.holdback_words)]
        if cfg.lead_words is not None and len(w.history) >= 2 and w.screen:
            agreed = common_prefix(w.history[-2], w.history[-1])
            shown = shown[: agreed + cfg.lead_words]
        tentative: list[str] = []
        if cfg.tentative_holdback_words is not None:
            tentative = tail[len(shown) : len(tail) - cfg.tentative_holdback_words]
        if cfg.trim_partial_punct:
            shown, tentative = _trim_last(shown), _trim_last(tentative)
        text = self._display(" ".join(pending + shown))
        if cfg.keep_screen_form and w.screen and text:
            text = " ".join(keep_form(w.screen, text.split()))
        if text or w.shown:
            committed = len(" ".join(text.split()[: len(pending)]))
            step.captions.append(
                CaptionEvent(
                    "partial", w.segment, text, w.seg_start, req.end, committed,
                    _latency_ms(now, req.end), level_db=speech_level_db(req.audio),
                    tentative=" ".join(tentative) if text else "",
                )
            )  # fmt: skip
            w.screen = text.split()
        return cut

    def _commit(
        self,
        w: Window,
        now: float,
        step: Step,
        req: DecodeRequest,
        words: list[str],
        timings: list[WordTiming] | None,
    ) -> bool:
        """Send locked words as a final at the last sentence end, or when too many wait.

        `words` is the partial that locked them, `timings` its word times (or None): with
        `cut_at_commits` the window is then cut between the last committed word and the next
        (True).
        """
        cfg = self.config
        pending = w.locked[w.emitted :]
        if not pending:
            return False
        cut = 0
        if cfg.commit_sentences:
            for i, word in enumerate(pending):
                if ends_sentence(word, pending[i + 1] if i + 1 < len(pending) else None):
                    cut = i + 1
        if cut == 0 and len(" ".join(pending)) >= cfg.max_locked_chars:
            cut = len(pending)
        if cut == 0:
            return False
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
            w.drop_before(req.start + boundary)
            w.locked = w.locked[w.emitted + cut :]
            w.emitted = 0
            end = w.start
        else:
            w.emitted += cut
        w.segment = self.new_segment()
        w.seg_start = end
        w.screen = []
        return boundary is not None

    def final(self, w: Window, result: DecodeResult | None, now: float, step: Step) -> None:
        """The final of window `w`, from its exact decode (None: the worker gave none)."""
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
        """`text` with a capital letter when it starts a sentence (`PolicyConfig.capitalize`)."""
        if not text or not self.config.capitalize:
            return text
        last = self._finals[-1] if self._finals else ""
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
        i = max(0, round((start - w.start) * SAMPLE_RATE))  # its audio: start..end of the window
        heard = w.audio()[i : max(i, round((end - w.start) * SAMPLE_RATE))]
        step.captions.append(
            CaptionEvent(
                "final", w.segment, text, start, end, len(text), _latency_ms(now, end), words,
                level_db=speech_level_db(heard),
            )
        )  # fmt: skip
        if text:
            self._finals.append(text)
            self._by_utterance.setdefault(w.utterance, []).append(text)
            for old in [u for u in self._by_utterance if u < w.utterance - 1]:
                del self._by_utterance[old]


def _latency_ms(now: float, end: float) -> float:
    return max(0.0, (now - end) * 1000.0)


def tail_words(text: str, n: int) -> str:
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


def _trim_last(words: list[str]) -> list[str]:
    """The words without the sentence punctuation Whisper puts after the last word of an
    unfinished window (`PolicyConfig.trim_partial_punct`); a word of punctuation alone goes."""
    if not words:
        return words
    last = words[-1].rstrip(".,?!;:\u3002\uff1f\uff01\u2026")
    return words[:-1] + [last] if last else words[:-1]
