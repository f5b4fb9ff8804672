"""The hand-run decoder stack gives bit-identical hidden states to transformers' decoder.

Real bundled Whisper base on real speech: prefill, one-token steps, multi-token verify steps
over a cache, cropping a rejected draft and feeding again, full and shortened audio contexts.
"""

from __future__ import annotations

import pytest
import torch

from streamcap.core.decode_types import DecodingOptions
from streamcap.decoding.lean import LeanCache, LeanDecoder, supports
from streamcap.decoding.speculative import SpeculativeDecoder
from streamcap.decoding.step import DecoderStep, crop_cache


@pytest.fixture(scope="module")
def hf_decoder(engine) -> DecoderStep:
    """The same model through transformers' own forward and full fp32 projection."""
    return SpeculativeDecoder(
        engine.main.model, engine.main.processor, "cpu", torch.float32, lean=False, screen=False
    ).step


@pytest.mark.parametrize("context_s", [None, 6.0])
@torch.inference_mode()
@pytest.mark.parametrize("clip", ["en_real_jfk", "en_real_librivox_0870"])
def test_lean_hidden_states_are_bit_identical(engine, hf_decoder, speech, clip, context_s):
    assert engine.decoder.step.lean is not None and supports(engine.decoder.step.decoder)
    lean: LeanDecoder = engine.decoder.step.lean
    enc = engine.encode(speech[clip], context_s=context_s)
    opts = DecodingOptions(language="en")
    result = engine.decode(enc, opts, drafter="none")
    tokens = engine.spec.prefix(engine.spec.language_id("en"), opts) + list(result.tokens)
    assert len(tokens) > 12
    schedules = {
        "one pass": [len(tokens)],
        "prefill then one token at a time": [4] + [1] * (len(tokens) - 4),
        "verify-sized steps": [4, 3, 1, 5, 2, 8] + [1] * len(tokens),
    }
    for name, steps in schedules.items():
        hf_cache, lean_cache = hf_decoder.new_cache(), lean.new_cache()
        pos = 0
        for n in steps:
            chunk = tokens[pos : pos + n]
            if not chunk:
                break
            want = hf_decoder.forward(chunk, hf_cache, enc.enc)
            got = lean.forward(chunk, lean_cache, enc.enc)
            assert torch.equal(want, got), f"{name}: rows {pos}..{pos + n} differ"
            pos += n
        # a rejected draft: crop both caches and feed a different continuation
        crop_cache(hf_cache, 6)
        lean_cache.crop(-(lean_cache.get_seq_length() - 6))
        assert lean_cache.get_seq_length() == 6
        other = [tokens[7], tokens[6], tokens[8]]
        assert torch.equal(
            hf_decoder.forward(other, hf_cache, enc.enc),
            lean.forward(other, lean_cache, enc.enc),
        )


@torch.inference_mode()
def test_lean_cache_bounds_and_window_change(engine, speech):
    lean: LeanDecoder = engine.decoder.step.lean
    cache = lean.new_cache()
    assert isinstance(cache, LeanCache) and cache.get_seq_length() == 0
    first = engine.encode(speech["en_real_jfk"][: 3 * 16000]).enc
    second = engine.encode(speech["en_real_forever"][: 3 * 16000]).enc
    a = lean.forward([engine.spec.sot], cache, first)
    cache.crop(0)
    # a new encoder output must not reuse the previous window's cross-attention keys
    b = lean.forward([engine.spec.sot], cache, second)
    fresh = lean.forward([engine.spec.sot], lean.new_cache(), second)
    assert torch.equal(b, fresh) and not torch.equal(a, b)
    cache.crop(5)  # a positive crop never grows the cache
    assert cache.get_seq_length() == 1
    with pytest.raises(ValueError, match="at most"):
        lean.forward([1] * (lean.max_len + 1), lean.new_cache(), first)
