"""`auto` for the vocabulary screen on a CPU: on or off by timing it here, once per machine.

The screen (`decoding.screen`) never changes a token; it only changes what a greedy choice
costs, and that depends on the CPU's int8/bf16 kernels as much as the encoder's precision does
(an Intel CPU with AVX512-BF16 and no AMX ran bf16 matmuls slower than fp32; this AMD EPYC with
AVX512-BF16 runs them faster). So, like the encoder (`models.precision_probe`), the first
engine on a machine times both ways of choosing a token over real decoder states of its model
(one row: a decoding step; eight rows: a verify pass over a draft), a warm-up then rounds
taking each in turn, the best of each, and keeps the screen only where it beats the full fp32
projection by `precision_probe.MARGIN`. The choice is cached beside the encoder's (same file,
same key plus ``|screen2``), and `streamcap models` shows both.

The rows come from speech (the bundled sample), because the screen's cost depends on them: its
log-probabilities re-score in fp32 every token within 10 of the best, a handful after speech
(3 to 81 per row on the sample with base) but tens of thousands after encoded silence, whose
distribution is flat. The first version of this probe decoded silence and timed the screen
at 0.25 s against 0.014 s for the fp32 projection on an AMX CPU where, over speech, it takes
0.007 s: it switched the screen off where it pays 2x. Choices it cached (key ``|screen``) are
not reused.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from streamcap.core.constants import BUNDLED_SAMPLE
from streamcap.decoding.screen import ScreenedProjection
from streamcap.decoding.step import DecoderStep
from streamcap.models.precision_probe import EncoderChoice, cached, choose, machine_key, store

#: Decoder rows per timed call: a one-token step and a verify pass over a 7-token draft.
ROW_COUNTS = (1, 8)
ROUNDS = 5
CALLS = 10  # calls per timing (a call is a few milliseconds)

Timer = Callable[[DecoderStep, torch.Tensor], dict[str, float]]


def probe_speech() -> np.ndarray:
    """The bundled speech sample's 16 kHz samples: decoder rows after speech, not silence
    (module docstring)."""
    from streamcap.audio.file import load_audio

    return load_audio(BUNDLED_SAMPLE)


def decoder_rows(step: DecoderStep, enc: torch.Tensor) -> torch.Tensor:
    """Eight hidden states of ``step``'s decoder over ``enc`` after words of text (the kind of
    rows a decode projects; the prefix's rows, flat over the vocabulary, are left out)."""
    spec = step.spec
    language = spec.language_id("en") if spec.multilingual else None
    tokens = spec.prefix(language, _options())
    tokens += list(spec.text_to_ids("And so my fellow Americans, ask not what your country"))
    return step.forward(tokens, step.new_cache(), enc)[-8:]  # rows after text: a decode's


def _options() -> Any:
    from streamcap.core.decode_types import DecodingOptions

    return DecodingOptions()


def measure(step: DecoderStep, rows: torch.Tensor) -> dict[str, float]:
    """Seconds for the greedy choices and log-probabilities of one and of eight rows, the full
    fp32 projection (``fp32``) against the screen (``screen``): best of `ROUNDS`."""
    screen = ScreenedProjection(step.proj_out.weight)
    ways: dict[str, Callable[[torch.Tensor], object]] = {
        "fp32": lambda r: _fp32_choice(step, r),
        "screen": lambda r: _screen_choice(step, screen, r),
    }
    best = dict.fromkeys(ways, math.inf)
    with torch.inference_mode():
        for way in ways.values():
            for n in ROW_COUNTS:
                way(rows[:n])
        for _ in range(ROUNDS):
            for name, way in ways.items():
                t0 = time.perf_counter()
                for _ in range(CALLS):
                    for n in ROW_COUNTS:
                        way(rows[:n])
                best[name] = min(best[name], (time.perf_counter() - t0) / CALLS)
    return best


def _fp32_choice(step: DecoderStep, rows: torch.Tensor) -> list[float]:
    logits = step.logits(rows)
    logits.masked_fill_(step.suppress_mask, -math.inf)
    choices = logits.argmax(-1).tolist()
    lse = torch.logsumexp(logits, -1)
    return [float(logits[i, t] - lse[i]) for i, t in enumerate(choices)]


def _screen_choice(step: DecoderStep, screen: ScreenedProjection, rows: torch.Tensor) -> object:
    banned = [step.suppress_mask] * len(rows)
    logits, choices, _ = screen.choose(rows, banned)
    return screen.log_softmax_at(rows, logits, choices)


def screen_choice(
    model_name: str,
    probe: Callable[[], tuple[DecoderStep, torch.Tensor]],
    *,
    timer: Timer = measure,
) -> EncoderChoice:
    """The cached choice for this machine and model, or a fresh timing (then cached):
    ``precision`` "screen" (on) or "fp32" (the full projection). ``probe`` gives the decoder
    step to time and its encoder output over `probe_speech`; it runs only on a cache miss
    (a 30 s encoder window: not a cost of every load)."""
    key = machine_key(model_name, torch.get_num_threads()) + "|screen2"  # rows after speech
    hit = cached(key)
    if hit is not None:
        return hit
    step, enc = probe()
    choice = choose(timer(step, decoder_rows(step, enc)))
    store(key, choice)
    return choice
