"""The caption policy's tuning (`PolicyConfig`), apart from the policy's state machine.

Frozen, validated on construction; every field's meaning and the measurement behind its
default are in the docstring. The CLI, the evaluation scripts and the server build one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from streamcap.core.text import GuardConfig

__all__ = ["PolicyConfig"]

# partial decodes run the encoder on the window's audio plus this margin, at least the minimum
# (finals always get Whisper's standard 30 s input); the live pipeline and the benchmark share it
PARTIAL_CONTEXT_MARGIN_S = 2.0
PARTIAL_CONTEXT_MIN_S = 6.0
RequestKind = Literal["partial", "final"]


@dataclass(frozen=True)
class PolicyConfig:
    """Caption policy tuning (defaults measured with scripts/eval_stream.py, see the issue note).

    - partial_interval_s: new audio between partial decodes of the open window.
    - first_partial_s: audio a window needs before its first partial (None: the interval).
    - pause_final_s: close and exactly decode the window once its audio has stopped growing
      for this long (stream time, beyond the segmenter's tail of silence); None: only at
      speech end.
    - early_final_s: once the window's audio ends in this much unvoiced audio (a pause may be
      beginning), its exact final decode starts on the audio so far, and no partial is asked
      for; if the pause lasts (`pause_final_s`), that decode is the window's final, and if
      speech resumes first it is discarded and the window goes on. None: finals start when the
      pause is confirmed. It must not exceed the segmenter's `tail_ms`, which is the most
      unvoiced audio the segmenter sends before speech resumes or the utterance ends.
    - agreement: consecutive partials that must agree on words to lock them (0: never lock;
      windows are then committed only when they close).
    - lock_margin: words at the end of any of those partials that are not locked yet.
    - commit_sentences / max_locked_chars: emit locked words as a final at a sentence end, or
      when this many characters are locked but not emitted.
    - holdback_words: unlocked words at the end of a partial that are not shown (the last word
      of a window cut mid-speech is often unfinished); never hides a partial's only words.
    - trim_partial_punct: drop the sentence punctuation Whisper puts after the last word of an
      unfinished window (it usually disappears when the next words come).
    - capitalize: start a caption with a capital letter when it starts a sentence (the stream's
      first, or after a final that ends one); Whisper's case for a window's first word varies
      from decode to decode, and partial and final then agree.
    - prompt_chars: previous final text given to the decoder as prompt (0: none). Off by
      default: on the recorded dev file lf3, prompting continuations with their utterance's
      text cost 0.9 WER points and raised flicker from 7.2 to 10.6 (Whisper repeats a short
      prompt: "Press 3" came out twice); the cut at the committed words' end alone loses no
      word (tests/core/test_commits.py).
    - short_prompt_s: the final of a window with less voiced audio than this (a short reply:
      "Yes.", "Tuesday.") is decoded after the stream's previous finals as prompt, the last
      `short_prompt_chars` of them (None: no such prompt). Whisper hears one or two words
      without context badly ("yesterday" came out "Yes, today." while its own partial had
      it right); the sentence before gives it the context a person has. Partials and long
      windows are not prompted (see `prompt_chars`). Off by default: measured on lf6 (32 real
      short replies, language detected, simulated clock) at 2.0 s, stream WER 8.23 -> 8.72 %
      (short windows that are not replies got worse: "55" came out "5 5", "clubs" "clothes"),
      short replies captioned 32/32 either way.
    - prompt_scope: "utterance": only the finals of the same utterance (what was committed
      before a cut, or before a pause that did not end it); "stream": all finals (on lf3
      1.5 WER points worse).
    - guard: the hallucination guard (`text.GuardConfig`, the same rule offline).
    - exact_finals: a closed window's final is its exact decode after the words already sent as
      finals: locked words not yet sent are shown as stable in partials, but the exact decode
      has the last word (where it only differs in case or punctuation, the shown form stays).
      False: locked words are kept as they are.
    - max_window_s: a window is closed at this length whatever happens (Whisper sees 30 s).
    - cut_at_commits: when locked words are sent as a final, the window's audio is cut at
      their end (the word times of the partial that locked them), so the rest of the utterance
      is decoded on its own, after the committed text as prompt (`prompt_chars`), and no word
      is decoded twice or lost to an alignment of two decodes. Partials are then aligned
      (`DecodeRequest.words`). False: the window keeps its audio and later decodes are
      aligned after the words already sent.
    - lead_words: a partial shows the words of its tail that the previous partial agreed on
      plus at most this many more (None: no limit); a segment's first partial shows its tail.
    - tentative_holdback_words: a partial also carries the words its decode heard after the
      ones it shows (`CaptionEvent.tentative`: held back, or not yet agreed on), less this
      many at the end (the last word of a window cut mid-speech is often unfinished); None:
      none. Only a viewer that follows the voice word by word shows them (the overlay's
      ``highlight=words``), so the text other viewers see keeps its holdback. Measured on lf3
      (real clock, lit word within 1 s of the voice, issue 37 item 6): leaving out the last
      word lit a wrong or cut word in 21-30 % of speech polls against 15 % with one left out.
    - keep_screen_form: where a new partial or a closed window's exact decode differs from the
      words on screen only in case and punctuation, the screen's form stays (nothing a viewer
      read is erased for a capital letter); punctuation added after the last such word is
      taken. False: only locked words keep their form in the final.
    """

    partial_interval_s: float = 1.0
    first_partial_s: float | None = None
    pause_final_s: float | None = 0.0
    early_final_s: float | None = 0.12
    agreement: int = 2
    lock_margin: int = 1
    commit_sentences: bool = True
    max_locked_chars: int = 84
    holdback_words: int = 2
    trim_partial_punct: bool = True
    capitalize: bool = True
    exact_finals: bool = True
    prompt_chars: int = 0
    prompt_scope: Literal["utterance", "stream"] = "utterance"
    short_prompt_s: float | None = None
    short_prompt_chars: int = 120
    cut_at_commits: bool = True
    lead_words: int | None = 1
    tentative_holdback_words: int | None = 1
    keep_screen_form: bool = True
    guard: GuardConfig = field(default_factory=GuardConfig)
    max_window_s: float = 29.5

    def __post_init__(self) -> None:
        if self.partial_interval_s <= 0:
            raise ValueError("partial_interval_s must be positive")
        if self.first_partial_s is not None and self.first_partial_s <= 0:
            raise ValueError("first_partial_s must be positive")
        if self.pause_final_s is not None and self.pause_final_s < 0:
            raise ValueError("pause_final_s must be >= 0")
        if self.early_final_s is not None and self.early_final_s <= 0:
            raise ValueError("early_final_s must be positive")
        if self.agreement < 0 or self.agreement == 1:
            raise ValueError("agreement must be 0 (off) or at least 2")
        if self.prompt_scope not in ("utterance", "stream"):
            raise ValueError("prompt_scope must be 'utterance' or 'stream'")
        if self.short_prompt_s is not None and self.short_prompt_s <= 0:
            raise ValueError("short_prompt_s must be positive")
        if self.short_prompt_chars < 0:
            raise ValueError("short_prompt_chars must be at least 0")
        if self.tentative_holdback_words is not None and self.tentative_holdback_words < 0:
            raise ValueError("tentative_holdback_words must be >= 0 (or None)")
        if self.max_locked_chars < 1 or self.holdback_words < 0 or self.prompt_chars < 0:
            raise ValueError("max_locked_chars must be >= 1; holdback/prompt must be >= 0")
        if not 0 < self.max_window_s <= 30.0:
            raise ValueError("max_window_s must be in (0, 30]")
