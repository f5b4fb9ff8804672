"""A decode's options and results as frozen dataclasses (in the style of openai/whisper).

Pure and light (no torch). They live in `core` because both sides use them: the caption policy
reads results (text, tokens, word times, log-probabilities) and the decoder
(`streamcap.decoding`, which re-exports them) writes them; in `decoding` they tied the pure
core to the decoder's folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "DecodeResult",
    "DecodeStats",
    "DecodingOptions",
    "JobInputs",
    "PromptText",
    "WordTiming",
]


@dataclass(frozen=True)
class DecodingOptions:
    """What to decode; the same options drive the speculative and the reference path."""

    language: str | None = None  # None: detect (multilingual models)
    task: str = "transcribe"  # or "translate"
    prompt_ids: tuple[int, ...] = ()  # previous text, fed after <|startofprev|>
    max_tokens_per_second: float = 12.0  # loop guard: tokens allowed per second of audio
    min_token_budget: int = 24  # ... plus this many, so short clips are never cut
    max_draft: int = 16  # upper bound on K
    initial_draft: int = 8  # K at the start of a decode


@dataclass(frozen=True)
class DecodeStats:
    """Counters of one decode, or the sum over many: ``total = total + stats``.

    Frozen, so a result's stats say what happened in that decode and nothing adds to them
    later; whoever sums keeps its own total (``DecodeStats()`` is the zero).
    """

    drafted: int = 0
    accepted: int = 0
    forward_passes: int = 0
    encoder_s: float = 0.0
    decoder_s: float = 0.0
    tokens: int = 0

    def __add__(self, other: DecodeStats) -> DecodeStats:
        return DecodeStats(
            drafted=self.drafted + other.drafted,
            accepted=self.accepted + other.accepted,
            forward_passes=self.forward_passes + other.forward_passes,
            encoder_s=self.encoder_s + other.encoder_s,
            decoder_s=self.decoder_s + other.decoder_s,
            tokens=self.tokens + other.tokens,
        )

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "drafted": self.drafted,
            "accepted": self.accepted,
            "forward_passes": self.forward_passes,
            "encoder_s": round(self.encoder_s, 4),
            "decoder_s": round(self.decoder_s, 4),
            "tokens": self.tokens,
            "acceptance_rate": round(self.acceptance_rate, 4),
        }


@dataclass(frozen=True)
class WordTiming:
    """One word of a decode with its time in the window (seconds from the window's first
    sample) and the mean probability of its tokens; ``word`` keeps its leading space, as the
    tokens spell it, so the words of a result joined are its text (`decoding.alignment`)."""

    word: str
    start: float
    end: float
    probability: float

    def shifted(self, seconds: float) -> WordTiming:
        """The same word ``seconds`` later (a window's times made a file's or a stream's)."""
        return WordTiming(self.word, self.start + seconds, self.end + seconds, self.probability)

    def as_dict(self) -> dict[str, str | float]:
        """The wire form (docs/design.md, "The protocol's shape": ``{word, start, end,
        probability}``), seconds to the ms."""
        return {
            "word": self.word,
            "start": round(self.start, 3),
            "end": round(self.end, 3),
            "probability": round(self.probability, 4),
        }


@dataclass(frozen=True)
class DecodeResult:
    """One decoded window: text tokens only (no prefix, no end-of-text).

    ``words`` is empty unless the decode was aligned (`Engine.align`): the tokens never change.
    """

    tokens: tuple[int, ...]
    text: str
    language: str | None
    no_speech_prob: float
    avg_logprob: float | None
    stopped_by: str  # "eot", "max_tokens", "loop"
    stats: DecodeStats = field(default_factory=DecodeStats)
    words: tuple[WordTiming, ...] = ()
    #: probability of ``language`` among the language tokens when it was detected, else None
    language_prob: float | None = None


@dataclass(frozen=True)
class PromptText:
    """A decode's prompt as text: the stream's own (``fixed``: its prompt and vocabulary,
    `core.prompting.stream_prompt`) and the policy's context (the text said before). Text, not
    token ids: a stream knows no tokenizer; whoever runs the job tokenizes it
    (`runtime.jobs.DecodeJob.prepared`, `core.prompting.join_prompt_ids`)."""

    fixed: str = ""
    context: str = ""


@dataclass(frozen=True)
class JobInputs:
    """What a decode needs that is only known when it starts (a stream's answer to "prepare"):
    the options (language and task; no prompt ids yet), the prompt as text, and the hypothesis
    to draft from."""

    options: DecodingOptions
    prompt: PromptText = PromptText()
    hypothesis: tuple[int, ...] | None = None
