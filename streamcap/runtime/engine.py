"""The Whisper engine: one main model (and optionally an assistant) on one device.

Everything that touches the model goes through here; the worker thread owns one instance.
It wires the decoding pieces: the main model's front end (features + encoder) and decoder
loop, and an assistant's decoder step (plus its own front end unless it shares the encoder).

`Engine` is the default engine of the registry (`runtime.engines`, "transformers") and an
`runtime.engine_api.InferenceEngine`; what it has beyond the port (``decoder``, ``frontend``,
the assistant, `make_drafter`, a ``drafter`` choice) is for batching (`runtime.batching`), the
benchmark and the exactness checks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, get_args

import numpy as np
import numpy.typing as npt
import torch

from streamcap.core.constants import (
    ENCODER_POSITIONS,
    SAMPLE_RATE,
    WINDOW_S,
)
from streamcap.core.decode_types import DecodeResult, DecodingOptions
from streamcap.decoding.alignment import Aligner
from streamcap.decoding.assistant import AssistantDecoder, same_encoder, same_tokenizer
from streamcap.decoding.batched_encode import context_positions
from streamcap.decoding.drafters import Drafter, HypothesisDrafter, ModelDrafter, NoDrafter
from streamcap.decoding.frontend import MEL_FRAMES_PER_POSITION, WhisperFrontEnd
from streamcap.decoding.spec import WhisperSpec
from streamcap.decoding.speculative import SpeculativeDecoder
from streamcap.decoding.step import DecoderStep
from streamcap.decoding.verify import DraftLength
from streamcap.models.loader import LoadedModel, Placement, choose_placement, load_model
from streamcap.models.precision_probe import EncoderChoice
from streamcap.models.registry import DEFAULT_MODEL
from streamcap.runtime.decoder_threads import (
    DecoderChoice,
    DecoderThreads,
    LoadFollowingDecode,
    PlainDecode,
    Preference,
    on_threads,
)
from streamcap.runtime.encoder_threads import (
    AdaptiveThreads,
    EncoderThreads,
    FixedThreads,
    identical_across,
)
from streamcap.runtime.engine_api import EncodedAudio, InferenceEngine

__all__ = ["Engine"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Encoded:
    """A window of audio run through the encoder (reused by every decode of that window)."""

    enc: torch.Tensor
    features: torch.Tensor
    duration_s: float
    encoder_s: float

    @property
    def positions(self) -> int:
        """Encoder positions run (1500 for the full 30 s; fewer for a shortened context)."""
        return int(self.enc.shape[1])


def _own(encoded: EncodedAudio) -> Encoded:
    """``encoded`` as this engine's own window: another engine's encoder output means nothing
    to it (the port hands a window back to the engine that encoded it)."""
    if not isinstance(encoded, Encoded):
        raise TypeError(f"not an encoded window of an Engine: {type(encoded).__name__}")
    return encoded


class Engine:
    """Loads models once and decodes windows of 16 kHz mono float32 audio.

    ``screen``: the main decoder's vocabulary screen (``DecoderStep``): True on any CPU, False
    never; None: with ``precision="auto"`` on a CPU, as timing it here says
    (`runtime.screen_probe`, cached with the encoder's choice), else as the CPU's rule says
    (``decoding.screen.screen_is_default``).
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        assistant: str | None = None,
        device: str = "auto",
        threads: int | None = None,
        precision: str = "auto",
        *,
        screen: bool | None = None,
    ) -> None:
        if threads:
            torch.set_num_threads(threads)
        self.placement: Placement = choose_placement(device, precision)
        by_timing = self.placement.measured  # `auto` on a CPU: times what it may choose
        self.main: LoadedModel = load_model(model, self.placement)
        self.placement = self.main.placement  # `auto` on a CPU: what the load measured
        device, dtype = self.placement.device, self.placement.dtype
        enc_dtype = self.placement.encoder_dtype  # the decoder's dtype, or bf16 on some CPUs
        self.frontend = WhisperFrontEnd(
            self.main.model, self.main.processor, device, dtype, enc_dtype
        )
        #: the screen's timing, when `auto` chose it by one (`runtime.screen_probe`)
        self.screen_choice: EncoderChoice | None = None
        if screen is None and by_timing and dtype == torch.float32:
            screen = self._measured_screen(model)
        self.decoder = SpeculativeDecoder(
            self.main.model, self.main.processor, device, dtype, screen=screen
        )
        self.assistant: AssistantDecoder | None = None
        self.assistant_model: Any = None
        self._aligner: Aligner | None = None  # made at the first `align`
        #: the encoder's thread count: fixed, or following the load (`adapt_threads`)
        self.encoder_threads: EncoderThreads = FixedThreads()
        #: the decoder's: all threads, or one while that is cheaper (`adapt_threads`)
        self.decoder_threads: DecoderThreads = PlainDecode()
        if assistant:
            loaded = load_model(assistant, self.placement)
            a_spec = WhisperSpec(loaded.model, loaded.processor)
            if not same_tokenizer(self.decoder.spec, a_spec):
                raise ValueError(
                    f"assistant {assistant!r} does not share the tokenizer of {model!r}; "
                    "speculative decoding needs the same vocabulary"
                )
            shared = same_encoder(self.main.model, loaded.model)
            # drafts need no exactness: no screen
            a_step = DecoderStep(loaded.model, a_spec, device, dtype, screen=False)
            a_front = (
                None
                if shared
                else WhisperFrontEnd(loaded.model, loaded.processor, device, dtype, enc_dtype)
            )
            self.assistant = AssistantDecoder(a_step, a_front)
            # for transformers' own assisted generate (benchmark column): HF's recipe shares
            # the encoder by running the assistant as a decoder-only WhisperForCausalLM
            self.assistant_model = _as_causal_lm(loaded.model) if shared else loaded.model

    def _measured_screen(self, model: str) -> bool:
        """`runtime.screen_probe`'s choice for this model here (timed once, then cached)."""
        from streamcap.runtime.screen_probe import probe_speech, screen_choice

        def probe() -> tuple[DecoderStep, torch.Tensor]:
            step = DecoderStep(self.main.model, WhisperSpec(self.main.model, self.main.processor),
                               self.placement.device, torch.float32, screen=False)  # fmt: skip
            features = self.frontend.features(probe_speech(), None)
            return step, self.frontend.encode(features, None)

        self.screen_choice = screen_choice(model, probe)
        return self.screen_choice.precision == "screen"

    @property
    def precision(self) -> str:
        """What runs at which precision, e.g. ``fp32`` or ``bf16-encoder+fp32-decoder``."""
        return self.placement.precision

    @property
    def spec(self) -> WhisperSpec:
        return self.decoder.spec

    @property
    def multilingual(self) -> bool:
        return self.decoder.spec.multilingual

    def encode(self, audio: npt.NDArray[np.float32], context_s: float | None = None) -> Encoded:
        """Log-mel + encoder for up to 30 s of audio (padded to 30 s as Whisper expects).

        ``context_s`` runs the encoder on only the first ``context_s`` seconds of positions
        (whisper.cpp's "audio context"): the cost falls in proportion, the transcript may
        differ slightly, so it is a knob for partials, never for finals.
        """
        if len(audio) > WINDOW_S * SAMPLE_RATE:
            raise ValueError("a window holds at most 30 s of audio")
        t0 = time.perf_counter()
        positions = context_positions(len(audio), context_s)  # None: the full 30 s
        frames = None if positions is None else MEL_FRAMES_PER_POSITION * positions
        features = self.frontend.features(audio, frames)
        with self.encoder_threads.run(positions or ENCODER_POSITIONS):
            enc = self.frontend.encode(features, positions)
        return Encoded(enc, features, len(audio) / SAMPLE_RATE, time.perf_counter() - t0)

    def adapt_threads(self, free_cores: bool = True, decoder: DecoderChoice = "follow") -> bool:
        """Let the thread counts follow the machine's load (a long-running live stream on a
        shared machine; a one-off `transcribe` keeps the fixed counts). Which count: with
        ``free_cores`` (where the kernel's counts can be read), the cores the other programs
        leave free (`runtime.free_cores`; no probes), else the count the encoder measured
        cheaper lately (`runtime.encoder_threads`). The encoder follows only where that cannot
        change a bit: on a CPU with more than one thread, once a real window's encoding is
        checked identical on 1 and on all threads. The decoder (`runtime.decoder_threads`),
        ``decoder``: ``follow`` decodes on the count preferred now (the same tokens: that
        module says why and which tests prove it); ``draft`` drafts on one thread and verifies
        every token on all; ``fixed`` keeps all threads. Defaults measured in issue 38's note.
        Whether anything adapts now."""
        if decoder not in get_args(DecoderChoice):
            raise ValueError(f"decoder threads: follow, draft or fixed, not {decoder!r}")
        n = torch.get_num_threads()
        if not self.placement.device.startswith("cpu") or n < 2:
            return False
        from streamcap.runtime.free_cores import FreeCores, OtherLoad
        from streamcap.runtime.screen_probe import probe_speech

        load = OtherLoad() if free_cores else None
        free = FreeCores(n, load) if load is not None and load.available else None
        follow: Preference | None = free
        if isinstance(self.encoder_threads, FixedThreads):
            features = self.frontend.features(probe_speech(), None)
            if identical_across(lambda: self.frontend.encode(features, None), (1, n)):
                self.encoder_threads = free or AdaptiveThreads((1, n))
            else:
                log.info("encoder threads stay at %d: 1 thread gives other bits on this CPU", n)
        if decoder != "fixed" and isinstance(self.decoder_threads, PlainDecode):
            if follow is None and isinstance(self.encoder_threads, AdaptiveThreads):
                follow = self.encoder_threads
            exact = decoder == "follow"
            self.decoder_threads = LoadFollowingDecode(n, follow=follow, one_is_exact=exact)
        return isinstance(self.encoder_threads, AdaptiveThreads | FreeCores) or not isinstance(
            self.decoder_threads, PlainDecode
        )

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
        encoded: EncodedAudio,
        options: DecodingOptions,
        hypothesis: Sequence[int] | None = None,
        drafter: str = "auto",
    ) -> DecodeResult:
        """Greedy decode; ``auto`` drafts from the hypothesis if given, else the assistant;
        ``none``: plain greedy through the same decoder step."""
        window = _own(encoded)
        if drafter == "auto":
            drafter = "hypothesis" if hypothesis else ("model" if self.assistant else "none")

        def run(d: Drafter, length: DraftLength | None) -> DecodeResult:
            return self.decoder.decode(
                window.enc, options, d, duration_s=window.duration_s, draft_length=length
            )

        draft_from = self.make_drafter(drafter, hypothesis, window)
        result = self.decoder_threads.decode(run, draft_from, self.spec.eot)
        # the encoder ran before (once per window, shared by its decodes): its time joins here
        stats = replace(result.stats, encoder_s=window.encoder_s)
        return replace(result, stats=stats)

    def align(
        self, encoded: EncodedAudio, options: DecodingOptions, result: DecodeResult
    ) -> DecodeResult:
        """``result`` (a decode of ``encoded`` with ``options``) with its ``words`` timed.

        One more decoder pass over the decode's own forced prefix (prompt included) and its
        tokens, following the model's alignment heads (`decoding.alignment`); the tokens and
        every other field are untouched. Times are seconds from the window's first sample.
        """
        if not result.tokens:
            return result
        window = _own(encoded)
        if self._aligner is None:
            self._aligner = Aligner(self.main.model, self.decoder.step, self.spec)
        spec = self.spec
        language = result.language or options.language
        token = spec.language_id(language) if spec.multilingual and language else None
        prefix = spec.prefix(token, options)
        with on_threads(self.decoder_threads.threads_now()):
            words = self._aligner.align(
                window.enc, prefix, result.tokens, window.duration_s, language, window.features
            )
        return replace(result, words=words)

    def transcribe(
        self,
        audio: npt.NDArray[np.float32],
        options: DecodingOptions | None = None,
        hypothesis: Sequence[int] | None = None,
        drafter: str = "auto",
    ) -> DecodeResult:
        """Encode + decode one window (at most 30 s)."""
        return self.decode(self.encode(audio), options or DecodingOptions(), hypothesis, drafter)

    def text_to_ids(self, text: str) -> tuple[int, ...]:
        """Token ids of plain text (for prompts)."""
        return self.spec.text_to_ids(text)

    def ids_to_text(self, ids: Sequence[int]) -> str:
        """The text of token ids, special tokens skipped (a result cut in parts)."""
        text: str = self.spec.tokenizer.decode(list(ids), skip_special_tokens=True)
        return text


def _as_causal_lm(model: Any) -> Any:
    from transformers import WhisperForCausalLM

    causal = WhisperForCausalLM(model.config).to(model.device, model.dtype)
    causal.model.decoder = model.model.decoder
    causal.proj_out = model.proj_out
    causal.generation_config = model.generation_config
    return causal.eval()


def adapt_threads(engine: InferenceEngine) -> bool:
    """`Engine.adapt_threads` for an engine that can (other engines: False)."""
    return isinstance(engine, Engine) and engine.adapt_threads()


def with_words(
    engine: InferenceEngine, encoded: EncodedAudio, options: DecodingOptions, result: DecodeResult
) -> DecodeResult:
    """``engine.align``, or ``result`` without words if aligning fails (logged): the words are
    an extra, and a final's text must never be lost for them."""
    try:
        return engine.align(encoded, options, result)
    except Exception:
        log.exception("word timing failed; the result keeps its text without words")
        return result


def options_for(engine: InferenceEngine, language: str | None, task: str) -> DecodingOptions:
    """Decoding options, defaulting English-only models to English."""
    opts = DecodingOptions(language=language, task=task)
    if not engine.multilingual:
        opts = replace(opts, language=None)
    return opts
