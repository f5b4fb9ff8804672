"""What a live stream is tuned by (`LiveConfig`), and how its language is chosen.

Its own module because more than the stream reads it: the command line and the server build a
`LiveConfig` from their flags and start messages (`split_language` turns a language setting into
the config's two fields) without needing the stream's threads, worker or audio. The stream's
rules (`core.stream.StreamProtocol`) apply it; the thresholds that lock a detected language are
here, beside the field that says whether it is locked at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from streamcap.core.load_shed import LoadShedConfig
from streamcap.core.policy_config import (
    PARTIAL_CONTEXT_MARGIN_S,
    PARTIAL_CONTEXT_MIN_S,
    PolicyConfig,
)
from streamcap.core.segmenter import SegmenterConfig

__all__ = ["LiveConfig"]

#: A partial locks the stream's language from its own detection only when its audio is at
#: least this long and the language's probability at least `LANGUAGE_MIN_PROB`; otherwise the
#: first final does. Measured with base on dev clips (../shared/eval-dev/manifest.jsonl, first
#: 1/2/3 s and whole clip): real English (en_real_cards_001..003) en at 0.86-0.96 from 1 s;
#: espeak TTS de/es/fr/nl often wrong even whole and even at high probability (fr_s02: th 0.87
#: at 3 s, es_s01: th 0.60), right ones 0.4-0.97. So a partial locks only when nearly sure;
#: the rest wait for the final, as before.
LANGUAGE_MIN_SPEECH_S = 3.0
LANGUAGE_MIN_PROB = 0.95
#: The language "code" that asks for detection in every utterance (people who switch).
AUTO_EACH = "auto-each"


def split_language(language: str | None) -> tuple[str | None, bool]:
    """A language setting (a code, None: detect once per stream, `AUTO_EACH`: detect in every
    utterance) as (``language``, ``lock_language``)."""
    if language == AUTO_EACH:
        return None, False
    return language, True


@dataclass(frozen=True)
class LiveConfig:
    """Everything a live stream is tuned by.

    - language: spoken language code, or None to detect it. With ``lock_language`` (the
      default) it is detected once per stream and kept for every later decode: until it is
      known no partial is shown (a partial's own detection locks it only from at least
      `LANGUAGE_MIN_SPEECH_S` of audio at probability >= `LANGUAGE_MIN_PROB`), and otherwise
      the first non-empty final's detected language is locked (a final's audio is the best
      evidence). ``lock_language=False`` ("auto-each"): every decode detects its own.
    - task: "transcribe" or "translate" (to English).
    - partial_context_margin_s: partials run the encoder on the window's audio plus this margin
      (seconds) instead of the standard 30 s; None: partials use the standard input too.
    - partial_context_min_s: the shortest encoder context a partial gets.
    - early_finals: start a window's exact final at the beginning of a pause
      (`PolicyConfig.early_final_s`) rather than when the pause is confirmed. A pause that turns
      out to be a breath voids that decode: its compute is lost, and no partial runs meanwhile.
      "auto": only while a final costs at most `early_final_max_cost_s` on this worker (measured
      on lf3 with tiny.en, finals of 0.46 s: final latency p50 0.65 -> 0.54 s, p95 0.80 ->
      0.70 s, 26 of 108 early finals voided, WER +0.16 points; with base on a 2-core CPU
      without bf16, finals of 1.0 s, the voided ones delayed other decodes: p95 1.66 ->
      1.83 s).
    - prompt: the stream's own prompt text (`core.prompting.stream_prompt`: words the model
      should know), before the policy's context in every decode's prompt.
    - coalesce_finals: a final submitted while the stream's previous final still waits,
      unstarted, is decoded with it as one window and the result split at the word times
      (`runtime.coalesce`): a backlog costs one encoder call instead of one per final. Off by
      default: measured on the tempo-1.3 hard file (README), Whisper's no-timestamps decode of
      a joined window often stops after its first sentence and the final it cut short is
      decoded again alone; the finals the joined decode completed are told before that second
      decode (the first no longer waits for both), yet p95 rose on that file.
    - load_shed: when the stream falls behind (a machine that cannot keep up), its partials
      are thinned, then paused, until it catches up (`core.load_shed`); finals never are.
    - word_timestamps: time the words of the decodes the policy asks for (`Engine.align`: one
      more decoder pass, 5-9 % of a final's cost): every final, and the partials that may
      commit words (the policy cuts the window at their end).
    """

    language: str | None = None
    task: str = "transcribe"
    segmenter: SegmenterConfig = field(default_factory=SegmenterConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    lock_language: bool = True
    partial_context_margin_s: float | None = PARTIAL_CONTEXT_MARGIN_S
    partial_context_min_s: float = PARTIAL_CONTEXT_MIN_S
    word_timestamps: bool = True
    coalesce_finals: bool = False
    early_finals: Literal["auto", "on", "off"] = "auto"
    early_final_max_cost_s: float = 0.6
    prompt: str = ""
    load_shed: LoadShedConfig = field(default_factory=LoadShedConfig)

    def __post_init__(self) -> None:
        if self.early_finals not in ("auto", "on", "off"):
            raise ValueError("early_finals must be 'auto', 'on' or 'off'")
        if self.task not in ("transcribe", "translate"):
            raise ValueError(f"task must be 'transcribe' or 'translate', got {self.task!r}")
        if self.segmenter.max_utterance_s > self.policy.max_window_s:
            raise ValueError("segmenter.max_utterance_s must fit in policy.max_window_s")
        if self.partial_context_margin_s is not None and self.partial_context_margin_s < 0:
            raise ValueError("partial_context_margin_s must be >= 0")
