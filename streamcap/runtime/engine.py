"""The Whisper engine: one main model (and optionally an assistant) on one device.

Everything that touches the model goes through here; the worker thread owns one instance.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from streamcap.decoding.assistant import AssistantDecoder, same_encoder, same_tokenizer
from streamcap.decoding.drafters import Drafter, HypothesisDrafter, ModelDrafter, NoDrafter
from streamcap.decoding.options import DecodeResult, DecodingOptions
from streamcap.decoding.speculative import SpeculativeDecoder
from streamcap.models.loader import LoadedModel, Placement, choose_placement, load_model
from streamcap.models.registry import DEFAULT_MODEL

SAMPLE_RATE = 16000
WINDOW_S = 30.0


@dataclass(frozen=True)
class Encoded:
    """A window of audio run through the encoder (reused by every decode of that window)."""

    enc: torch.Tensor
    features: torch.Tensor
    duration_s: float
    encoder_s: float


class Engine:
    """Loads models once and decodes windows of 16 kHz mono float32 audio."""

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        assistant: str | None = None,
        device: str = "auto",
        threads: int | None = None,
    ) -> None:
        if threads:
            torch.set_num_threads(threads)
        self.placement: Placement = choose_placement(device)
        self.main: LoadedModel = load_model(model, self.placement)
        self.decoder = SpeculativeDecoder(
            self.main.model, self.main.processor, self.placement.device, self.placement.dtype
        )
        self.assistant: AssistantDecoder | None = None
        self.assistant_model: Any = None
        if assistant:
            loaded = load_model(assistant, self.placement)
            a_dec = SpeculativeDecoder(  # drafts need no exactness: no screen
                loaded.model,
                loaded.processor,
                self.placement.device,
                self.placement.dtype,
                screen=False,
            )
            if not same_tokenizer(self.decoder, a_dec):
                raise ValueError(
                    f"assistant {assistant!r} does not share the tokenizer of {model!r}; "
                    "speculative decoding needs the same vocabulary"
                )
            shared = same_encoder(self.main.model, loaded.model)
            self.assistant = AssistantDecoder(a_dec, shared)
            # for transformers' own assisted generate (benchmark column): HF's recipe shares
            # the encoder by running the assistant as a decoder-only WhisperForCausalLM
            self.assistant_model = _as_causal_lm(loaded.model) if shared else loaded.model

    @property
    def spec(self) -> Any:
        return self.decoder.spec

    @property
    def multilingual(self) -> bool:
        return self.decoder.spec.multilingual

    def encode(self, audio: np.ndarray, context_s: float | None = None) -> Encoded:
        """Log-mel + encoder for up to 30 s of audio (padded to 30 s as Whisper expects).

        ``context_s`` runs the encoder on only the first ``context_s`` seconds of positions
        (whisper.cpp's "audio context"): the cost falls in proportion, the transcript may
        differ slightly, so it is a knob for partials, never for finals.
        """
        if len(audio) > WINDOW_S * SAMPLE_RATE:
            raise ValueError("a window holds at most 30 s of audio")
        t0 = time.perf_counter()
        positions = None
        if context_s is not None:
            positions = math.ceil(min(WINDOW_S, max(context_s, len(audio) / SAMPLE_RATE)) * 50)
        short = positions is not None and positions < int(WINDOW_S * 50)
        features = self.decoder.features(audio, 2 * positions if short and positions else None)
        enc = self.decoder.encode(features, positions)
        return Encoded(enc, features, len(audio) / SAMPLE_RATE, time.perf_counter() - t0)

    def make_drafter(self, kind: str, hypothesis: Sequence[int] | None, enc: Encoded) -> Drafter:
        """``hypothesis`` (a previous decode), ``model`` (the assistant), or ``none``."""
        if kind == "hypothesis" and hypothesis:
            return HypothesisDrafter(hypothesis, eot=self.spec.eot)
        if kind == "model" and self.assistant is not None:
            self.assistant.set_window(enc.enc, enc.features)
            return ModelDrafter(self.assistant)
        return NoDrafter()

    def decode(
        self,
        encoded: Encoded,
        options: DecodingOptions,
        hypothesis: Sequence[int] | None = None,
        drafter: str = "auto",
    ) -> DecodeResult:
        """Greedy decode; ``auto`` drafts from the hypothesis if given, else the assistant."""
        if drafter == "auto":
            drafter = "hypothesis" if hypothesis else ("model" if self.assistant else "none")
        result = self.decoder.decode(
            encoded.enc,
            options,
            self.make_drafter(drafter, hypothesis, encoded),
            duration_s=encoded.duration_s,
        )
        result.stats.encoder_s = encoded.encoder_s
        return result

    def transcribe(
        self,
        audio: np.ndarray,
        options: DecodingOptions | None = None,
        hypothesis: Sequence[int] | None = None,
        drafter: str = "auto",
    ) -> DecodeResult:
        """Encode + decode one window (at most 30 s)."""
        return self.decode(self.encode(audio), options or DecodingOptions(), hypothesis, drafter)

    def text_to_ids(self, text: str) -> tuple[int, ...]:
        """Token ids of plain text (for prompts)."""
        return tuple(self.spec.tokenizer.encode(" " + text.strip(), add_special_tokens=False))


def _as_causal_lm(model: Any) -> Any:
    from transformers import WhisperForCausalLM

    causal = WhisperForCausalLM(model.config).to(model.device, model.dtype)
    causal.model.decoder = model.model.decoder
    causal.proj_out = model.proj_out
    causal.generation_config = model.generation_config
    return causal.eval()


def options_for(engine: Engine, language: str | None, task: str) -> DecodingOptions:
    """Decoding options, defaulting English-only models to English."""
    opts = DecodingOptions(language=language, task=task)
    if not engine.multilingual:
        opts = replace(opts, language=None)
    return opts
