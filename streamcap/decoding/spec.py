"""Token ids and rules of one Whisper model, read once from its generation config.

No torch here: the forced prefix and the language/task ids are plain integers, so the caption
server can vet a language with the same rule the decoder applies.
"""

from __future__ import annotations

from typing import Any

from streamcap.core.decode_types import DecodingOptions

__all__ = ["DecodingError", "WhisperSpec"]

MAX_PROMPT_TOKENS = 223  # Whisper keeps at most half the 448-token context for the prompt


class DecodingError(ValueError):
    """Options the model cannot honour (unknown language, translate on English-only...)."""


class WhisperSpec:
    """Special tokens, suppress rules and sizes of one model (``model``: transformers')."""

    def __init__(self, model: Any, processor: Any) -> None:
        gen = model.generation_config
        self.tokenizer: Any = processor.tokenizer
        self.eot: int = int(gen.eos_token_id)
        self.sot: int = int(gen.decoder_start_token_id)
        self.no_timestamps: int = int(gen.no_timestamps_token_id)
        self.no_speech: int = self.no_timestamps - 1  # <|nocaptions|> / <|nospeech|>
        self.prev: int = int(gen.prev_sot_token_id)
        self.multilingual: bool = bool(getattr(gen, "is_multilingual", False))
        self.lang_to_id: dict[str, int] = dict(getattr(gen, "lang_to_id", None) or {})
        self.task_to_id: dict[str, int] = dict(getattr(gen, "task_to_id", None) or {})
        self.suppress: list[int] = list(gen.suppress_tokens or [])
        self.begin_suppress: list[int] = list(gen.begin_suppress_tokens or [])
        self.max_length: int = int(model.config.max_target_positions)
        self.vocab_size: int = int(model.config.vocab_size)
        self._prompt_ids: dict[str, tuple[int, ...]] = {}

    def text_to_ids(self, text: str) -> tuple[int, ...]:
        """Token ids of plain text (prompts): the leading space Whisper's own text has.
        Cached per text (a stream's prompts repeat from decode to decode; bounded)."""
        if not text:
            return ()
        ids = self._prompt_ids.get(text)
        if ids is None:
            if len(self._prompt_ids) > 256:
                self._prompt_ids.clear()
            encoded = self.tokenizer.encode(" " + text.strip(), add_special_tokens=False)
            ids = self._prompt_ids[text] = tuple(int(i) for i in encoded)
        return ids

    def language_id(self, language: str) -> int:
        key = language if language.startswith("<|") else f"<|{language}|>"
        if key not in self.lang_to_id:
            raise DecodingError(f"unknown language {language!r}")
        return self.lang_to_id[key]

    def language_of(self, token: int) -> str:
        for key, value in self.lang_to_id.items():
            if value == token:
                return key[2:-2]
        return "?"

    def prefix(self, language_token: int | None, options: DecodingOptions) -> list[int]:
        """The forced decoder prompt: [prev, prompt...] sot [lang, task] notimestamps."""
        ids: list[int] = []
        if options.prompt_ids:
            ids += [self.prev, *list(options.prompt_ids)[-MAX_PROMPT_TOKENS:]]
        ids.append(self.sot)
        if self.multilingual:
            if options.task not in self.task_to_id:
                raise DecodingError(f"unknown task {options.task!r}")
            ids += [language_token if language_token is not None else self.language_id("en")]
            ids.append(self.task_to_id[options.task])
        elif options.task != "transcribe":
            raise DecodingError("this English-only model cannot translate")
        ids.append(self.no_timestamps)
        return ids
