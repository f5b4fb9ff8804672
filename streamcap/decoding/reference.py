"""The reference: the main model's own greedy ``generate`` under the same rules.

Used by tests and benchmarks to prove the speculative decoder exact, and as the "plain greedy"
column of ``scripts/bench_decoding.py``. The loop guard joins ``generate`` as a public
``StoppingCriteria`` plus ``max_new_tokens``, so both paths stop at the same token.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.modeling_outputs import BaseModelOutput

from streamcap.core.decode_types import DecodeStats, DecodingOptions
from streamcap.decoding.guard import LoopGuard
from streamcap.decoding.language import detect_language
from streamcap.decoding.speculative import SpeculativeDecoder

__all__ = ["reference_decode"]


class LoopStoppingCriteria(StoppingCriteria):
    """Stop ``generate`` where :class:`LoopGuard` would stop our decoder."""

    def __init__(self, guard: LoopGuard, prefix_len: int) -> None:
        self.guard = guard
        self.prefix_len = prefix_len

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        done = [self.guard.is_loop(row[self.prefix_len :].tolist()) for row in input_ids]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


@torch.inference_mode()
def reference_decode(
    decoder: SpeculativeDecoder,
    enc: torch.Tensor,
    options: DecodingOptions,
    duration_s: float = 30.0,
    assistant_model: Any = None,
    features: torch.Tensor | None = None,
) -> tuple[list[int], DecodeStats]:
    """Greedy ``generate`` from a precomputed encoder output; returns text tokens and stats.

    With an assistant that has its own encoder, transformers needs the log-mel ``features``
    (it runs both encoders; the main encoder's time is then inside the measured time).
    A ``WhisperForCausalLM`` assistant shares the main encoder output, as in HF's recipe.

    Exactness is defined at the model's precision: ``enc`` is the front end's output (the
    encoder at its dtype, cast to the decoder's), so this is ``generate`` of the same model at
    the same precision. With a bf16 encoder and an fp32 decoder, ``features`` of any dtype
    work: the loader's hooks cast them to the encoder's dtype and its output to the decoder's
    (``streamcap.models.loader.mixed_precision_encoder``).
    """
    spec = decoder.spec
    guard = LoopGuard(options.max_tokens_per_second, options.min_token_budget)
    language = options.language
    if spec.multilingual and language is None:
        lang_token, _ = detect_language(decoder.step, enc)
        language = spec.language_of(lang_token)
    lang_token_id = spec.language_id(language) if spec.multilingual and language else None
    prefix = spec.prefix(lang_token_id, options)
    budget = guard.token_budget(duration_s, spec.max_length - len(prefix))
    kwargs: dict[str, Any] = {}
    if spec.multilingual:
        kwargs.update(language=language, task=options.task)
    if options.prompt_ids:
        kwargs["prompt_ids"] = torch.tensor([spec.prev, *options.prompt_ids], device=decoder.device)
    if assistant_model is not None:
        kwargs["assistant_model"] = assistant_model
    own_encoder = assistant_model is not None and hasattr(assistant_model.model, "encoder")
    if own_encoder:
        if features is None:
            raise ValueError("an assistant with its own encoder needs the log-mel features")
        kwargs["input_features"] = features
    else:
        kwargs["encoder_outputs"] = BaseModelOutput(last_hidden_state=enc)
    t0 = time.perf_counter()
    out = decoder.model.generate(
        max_new_tokens=budget,
        stopping_criteria=StoppingCriteriaList([LoopStoppingCriteria(guard, len(prefix))]),
        do_sample=False,
        num_beams=1,
        **kwargs,
    )
    elapsed = time.perf_counter() - t0
    seq = out.sequences if hasattr(out, "sequences") else out
    tokens = [t for t in seq[0].tolist() if t != spec.eot]
    # generate may return the forced prefix in front of the text tokens
    if tokens[: len(prefix)] == prefix:
        tokens = tokens[len(prefix) :]
    return tokens, DecodeStats(decoder_s=elapsed, tokens=len(tokens))
