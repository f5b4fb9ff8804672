"""Greedy Whisper decoding that verifies drafts in one forward pass over the KV cache.

We own the decoder loop (no ``generate``): it saves generate's per-token overhead as well as
forward passes, and lets every drafter share the same verify step. The output is token for
token what the main model's own greedy ``generate`` returns with the same prefix, suppress
rules and stop rules (see ``reference.py`` and the tests). Each step runs the decoder layers
through ``lean.py`` (bit-identical to transformers' modules, preallocated KV cache) and picks
tokens through ``screen.py`` (exact fp32 argmax from a bounded int8/bf16 projection) where
those apply.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from streamcap.decoding.drafters import Drafter, NoDrafter
from streamcap.decoding.guard import LoopGuard
from streamcap.decoding.lean import LeanDecoder, supports
from streamcap.decoding.options import DecodeResult, DecodeStats, DecodingOptions
from streamcap.decoding.screen import ScreenedProjection, cpu_bf16_is_fast
from streamcap.decoding.verify import DraftLength, accept, extend

MAX_PROMPT_TOKENS = 223  # Whisper keeps at most half the 448-token context for the prompt
_VERIFY_CHUNK = 8  # rows projected onto the vocabulary at a time while verifying


class DecodingError(ValueError):
    """Options the model cannot honour (unknown language, translate on English-only...)."""


class WhisperSpec:
    """Token ids and suppress rules of one model, read once from its generation config."""

    def __init__(self, model: Any, processor: Any) -> None:
        gen = model.generation_config
        self.tokenizer = processor.tokenizer
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


def _cache_kwarg(decoder: Any) -> str:
    params = inspect.signature(decoder.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class SpeculativeDecoder:
    """Encoder once per window; decoder loop with draft verification and a KV cache."""

    def __init__(
        self,
        model: Any,
        processor: Any,
        device: str,
        dtype: torch.dtype,
        *,
        lean: bool = True,
        screen: bool = True,
    ) -> None:
        self.model = model
        self.processor = processor
        self.device = torch.device(device)
        self.dtype = dtype
        self.spec = WhisperSpec(model, processor)
        self.decoder = model.model.decoder
        self.encoder = model.model.encoder
        self.proj_out = model.proj_out
        self._cache_kw = _cache_kwarg(self.decoder)
        # the same layers run by hand (bit-identical, far less overhead); transformers' own
        # forward stays for decoders laid out differently
        self.lean = LeanDecoder(self.decoder) if lean and supports(self.decoder) else None
        vocab = self.spec.vocab_size
        self._suppress = torch.zeros(vocab, dtype=torch.bool, device=self.device)
        self._suppress[[t for t in self.spec.suppress if t < vocab]] = True
        self._begin = torch.zeros(vocab, dtype=torch.bool, device=self.device)
        self._begin[[t for t in self.spec.begin_suppress if t < vocab]] = True
        self._begin |= self._suppress
        # fp32 on a CPU with native bf16: pick greedy tokens through a bounded int8/bf16
        # screen (exact fp32 argmax, a fraction of the memory traffic); see screen.py
        self.screen: ScreenedProjection | None = None
        if screen and self.device.type == "cpu" and dtype == torch.float32 and cpu_bf16_is_fast():
            self.screen = ScreenedProjection(self.proj_out.weight)
        self._lang_mask: torch.Tensor | None = None
        if self.spec.lang_to_id:
            self._lang_mask = torch.ones(vocab, dtype=torch.bool, device=self.device)
            self._lang_mask[list(self.spec.lang_to_id.values())] = False

    # -- encoder ---------------------------------------------------------------------------
    def features(self, audio: np.ndarray, frames: int | None = None) -> torch.Tensor:
        """Log-mel features of audio padded to 30 s, exactly as the processor makes them.

        ``frames`` asks for only the first frames (a shortened audio context). They are the
        same numbers: the padding is zeros either way, its log-mel floor never sets the
        clamping maximum, and we keep a quarter second of zeros past the audio so the STFT's
        reflected edge sees zeros as it would in the full input.
        """
        fe = self.processor.feature_extractor
        kwargs: dict[str, Any] = {}
        if frames is not None:
            hop = int(fe.hop_length)
            samples = max(frames * hop, len(audio) + 4000)
            samples = -(-samples // (2 * hop)) * 2 * hop  # whole encoder positions
            if samples < int(fe.n_samples):
                kwargs["max_length"] = samples
        feats = fe(audio, sampling_rate=16000, return_tensors="pt", **kwargs).input_features
        if frames is not None:
            feats = feats[..., :frames]
        return feats.to(self.device, self.dtype)

    @torch.inference_mode()
    def encode(self, features: torch.Tensor, positions: int | None = None) -> torch.Tensor:
        """Encoder output; ``positions`` < 1500 encodes only the first ``positions / 50`` s.

        transformers' ``WhisperEncoder`` insists on 3000 mel frames, so the shortened path runs
        the same modules by hand on the sliced features and positional embeddings.
        """
        enc = self.encoder
        if positions is None or positions >= enc.embed_positions.weight.shape[0]:
            return enc(features).last_hidden_state
        x = features[..., : 2 * positions]
        x = torch.nn.functional.gelu(enc.conv1(x))
        x = torch.nn.functional.gelu(enc.conv2(x))
        x = x.permute(0, 2, 1) + enc.embed_positions.weight[:positions]
        for layer in enc.layers:
            out = layer(x, None)
            x = out[0] if isinstance(out, tuple) else out
        return enc.layer_norm(x)

    # -- decoder ---------------------------------------------------------------------------
    def _new_cache(self) -> Any:
        if self.lean is not None:
            return self.lean.new_cache()
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        return EncoderDecoderCache(DynamicCache(), DynamicCache())

    def _forward(self, tokens: Sequence[int], cache: Any, enc: torch.Tensor) -> torch.Tensor:
        if self.lean is not None:
            return self.lean.forward(tokens, cache, enc)
        ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)
        out = self.decoder(
            input_ids=ids,
            encoder_hidden_states=enc,
            use_cache=True,
            **{self._cache_kw: cache},
        )
        return out.last_hidden_state[0]

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj_out(hidden).float()

    def _choose(
        self, rows: torch.Tensor, begin: bool, skip: int = 0
    ) -> tuple[torch.Tensor, list[int]]:
        """Log-probability-grade logits of ``rows`` (suppressed tokens at -inf) and the exact
        greedy choice after each row but the first ``skip`` (``begin``: row ``skip`` is the
        first generated token)."""
        banned = [self._begin if begin and i == skip else self._suppress for i in range(len(rows))]
        if self.screen is not None:
            logits, choices, _ = self.screen.choose(rows, banned, skip)
            return logits, choices
        logits = self._logits(rows)
        for i in range(skip, len(rows)):
            logits[i].masked_fill_(banned[i], -math.inf)
        return logits, logits[skip:].argmax(-1).tolist()

    def _verify_rows(
        self,
        rows: torch.Tensor,
        draft: Sequence[int],
        *,
        begin: bool,
        extra: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[int], torch.Tensor | None]:
        """Greedy choices after each row, projecting onto the vocabulary chunk by chunk.

        The projection onto the vocabulary is the costliest part of a step, so rows past the
        first disagreement with the draft are never projected. ``extra`` (the <|sot|> row,
        for the no-speech probability) rides along with the first chunk; its unmasked
        logits come back third.
        """
        parts: list[torch.Tensor] = []
        predicted: list[int] = []
        extra_logits: torch.Tensor | None = None
        for c0 in range(0, rows.shape[0], _VERIFY_CHUNK):
            chunk = rows[c0 : c0 + _VERIFY_CHUNK]
            if c0 == 0 and extra is not None:
                logits, chosen = self._choose(torch.cat([extra[None], chunk]), begin, skip=1)
                extra_logits, logits = logits[0], logits[1:]
            else:
                logits, chosen = self._choose(chunk, begin and c0 == 0)
            parts.append(logits)
            predicted += chosen
            checked = min(len(predicted), len(draft))
            if any(predicted[i] != draft[i] for i in range(c0, checked)):
                break
        return (parts[0] if len(parts) == 1 else torch.cat(parts)), predicted, extra_logits

    def _logprobs(self, rows: torch.Tensor, logits: torch.Tensor, tokens: list[int]) -> list[float]:
        """Log-probability of ``tokens[i]`` after ``rows[i]`` (``logits``: what ``_choose``
        gave for those rows)."""
        if self.screen is not None:
            return self.screen.log_softmax_at(rows, logits, tokens)
        lse = torch.logsumexp(logits, -1)
        return [float(logits[i, t] - lse[i]) for i, t in enumerate(tokens)]

    @torch.inference_mode()
    def detect_language(self, enc: torch.Tensor) -> tuple[int, float]:
        """Most likely language token and the no-speech probability, from one step on <|sot|>."""
        logits = self._logits(self._forward([self.spec.sot], self._new_cache(), enc))[-1]
        no_speech = float(torch.softmax(logits, -1)[self.spec.no_speech])
        if self._lang_mask is None:
            return -1, no_speech
        masked = logits.masked_fill(self._lang_mask, -math.inf)
        return int(masked.argmax()), no_speech

    @torch.inference_mode()
    def decode(
        self,
        enc: torch.Tensor,
        options: DecodingOptions,
        drafter: Drafter | None = None,
        duration_s: float = 30.0,
        guard: LoopGuard | None = None,
        draft_length: DraftLength | None = None,
    ) -> DecodeResult:
        """Greedy decode of one window, verifying drafts from ``drafter``."""
        t0 = time.perf_counter()
        drafter = drafter or NoDrafter()
        guard = guard or LoopGuard(options.max_tokens_per_second, options.min_token_budget)
        stats = DecodeStats()
        spec = self.spec
        language_token: int | None = None
        no_speech = float("nan")
        if spec.multilingual:
            if options.language is None:
                language_token, no_speech = self.detect_language(enc)
                stats.forward_passes += 1
            else:
                language_token = spec.language_id(options.language)
        prefix = spec.prefix(language_token, options)
        budget = guard.token_budget(duration_s, spec.max_length - len(prefix))
        sot_row = prefix.index(spec.sot)
        drafter.begin(prefix)
        # a free drafter (the previous hypothesis) may propose all it has at once
        free = getattr(drafter, "free", False)
        k = draft_length or DraftLength(
            k=options.max_draft if free else options.initial_draft, k_max=options.max_draft
        )
        cache = self._new_cache()
        generated: list[int] = []
        pending = list(prefix)  # tokens whose keys/values are not in the cache yet
        logprob_sum = 0.0
        stopped_by: str | None = None
        first = True
        while stopped_by is None:
            room = budget - len(generated)
            want = min(k.next_k(), room)
            draft = list(drafter.propose(generated, want))[:want] if want > 0 else []
            hidden = self._forward(pending + draft, cache, enc)
            stats.forward_passes += 1
            rows = hidden[len(pending) - 1 :]
            extra = hidden[sot_row] if first and math.isnan(no_speech) else None
            logits, predicted, sot_logits = self._verify_rows(rows, draft, begin=first, extra=extra)
            if sot_logits is not None:
                sot = hidden[sot_row : sot_row + 1]
                no_speech = math.exp(self._logprobs(sot, sot_logits[None], [spec.no_speech])[0])
            first = False
            n_ok, gained = accept(draft[: len(predicted) - 1], predicted)
            stats.drafted += len(draft)
            stats.accepted += n_ok
            k.update(len(draft), n_ok)
            ext = extend(generated, gained, eot=spec.eot, budget=budget, guard=guard)
            stopped_by = ext.stopped_by
            if ext.appended:
                n_new = len(ext.appended)
                new = list(ext.appended)
                logprob_sum += sum(self._logprobs(rows[:n_new], logits[:n_new], new))
            if stopped_by is None:
                # keep the cache for pending + accepted drafts; the bonus token is next input
                keep = cache.get_seq_length() - (len(draft) - n_ok)
                _crop(cache, keep)
                pending = [gained[-1]]
        stats.tokens = len(generated)
        stats.decoder_s = time.perf_counter() - t0
        text = spec.tokenizer.decode(generated, skip_special_tokens=True)
        return DecodeResult(
            tokens=tuple(generated),
            text=text,
            language=spec.language_of(language_token) if language_token is not None else None,
            no_speech_prob=no_speech,
            avg_logprob=logprob_sum / len(generated) if generated else None,
            stopped_by=stopped_by,
            stats=stats,
        )


def _crop(cache: Any, length: int) -> None:
    """Drop cached positions beyond ``length`` (negative crop works across transformers 4/5)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)
