"""The speculative decoder returns exactly the main model's greedy ``generate`` output.

Real bundled Whisper base on real speech, for every drafter, including wrong and empty ones.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from streamcap.decoding import DecodingOptions, HypothesisDrafter, NoDrafter
from streamcap.decoding.assistant import AssistantDecoder, same_encoder, same_tokenizer
from streamcap.decoding.drafters import FixedDrafter, ModelDrafter
from streamcap.decoding.frontend import WhisperFrontEnd
from streamcap.decoding.reference import reference_decode
from streamcap.decoding.spec import DecodingError, WhisperSpec
from streamcap.decoding.speculative import SpeculativeDecoder
from streamcap.decoding.step import DecoderStep

CLIPS = ["en_real_jfk", "en_real_librivox_0870", "en_real_forever", "en_real_praatio_mary"]


def _windows(audio: np.ndarray, step: float = 1.0) -> list[np.ndarray]:
    ends = [int(t * 16000) for t in np.arange(step, len(audio) / 16000, step)]
    return [audio[:e] for e in ends] + [audio]


@pytest.mark.parametrize("clip", CLIPS)
def test_every_drafter_matches_generate_on_growing_windows(engine, speech, clip):
    audio = speech[clip]
    opts = DecodingOptions(language="en")
    prev: tuple[int, ...] = ()
    for window in _windows(audio, 2.0):
        enc = engine.encode(window)
        ref, _ = reference_decode(engine.decoder, enc.enc, opts, enc.duration_s)
        drafters = {
            "none": NoDrafter(),
            "previous hypothesis": HypothesisDrafter(prev, eot=engine.spec.eot),
            "exact answer": HypothesisDrafter(ref, eot=engine.spec.eot),
            "empty": HypothesisDrafter([]),
            "wrong": FixedDrafter([220, 50257, 1000, 2000] * 40),
            "shifted": HypothesisDrafter(ref[3:] + ref[:3]),
        }
        for name, drafter in drafters.items():
            got = engine.decoder.decode(enc.enc, opts, drafter, duration_s=enc.duration_s)
            assert list(got.tokens) == ref, f"{clip}: drafter {name} diverged"
        exact = engine.decoder.decode(
            enc.enc, opts, HypothesisDrafter(ref, eot=engine.spec.eot), enc.duration_s
        )
        plain = engine.decoder.decode(enc.enc, opts, NoDrafter(), enc.duration_s)
        # a perfect draft must save forward passes, or the drafting is not wired in
        assert exact.stats.forward_passes < plain.stats.forward_passes or len(ref) < 2
        assert exact.stats.accepted == exact.stats.drafted  # every token and end-of-text
        assert exact.stats.forward_passes <= 3
        prev = tuple(got.tokens)
    assert "country" in engine.spec.tokenizer.decode(list(prev)) or clip != "en_real_jfk"


def test_language_detection_and_prompt_match_generate(engine, speech):
    enc = engine.encode(speech["en_real_librivox_0880"])
    for opts in (
        DecodingOptions(language=None),
        DecodingOptions(language="en", prompt_ids=engine.text_to_ids("Mr. Dashwood, Norland.")),
        DecodingOptions(language="en", task="translate"),
    ):
        ref, _ = reference_decode(engine.decoder, enc.enc, opts, enc.duration_s)
        got = engine.decoder.decode(enc.enc, opts, FixedDrafter(ref[1:]), enc.duration_s)
        assert list(got.tokens) == ref
    detected = engine.decoder.decode(enc.enc, DecodingOptions(language=None))
    assert detected.language == "en"
    with pytest.raises(DecodingError):
        engine.decoder.decode(enc.enc, DecodingOptions(language="xx"))


def test_model_drafter_shares_encoder_and_matches_generate(engine, speech):
    """An assistant with base's tokenizer: a 1-layer cut of base's own decoder (weak drafts)
    and base itself (perfect drafts). Both share the main encoder, like distil-whisper."""
    weak = copy.deepcopy(engine.main.model)
    weak.model.decoder.layers = weak.model.decoder.layers[:1]
    weak.config.decoder_layers = 1
    enc = engine.encode(speech["en_real_jfk"])
    opts = DecodingOptions(language="en")
    ref, _ = reference_decode(engine.decoder, enc.enc, opts, enc.duration_s)
    for model, perfect in ((weak, False), (engine.main.model, True)):
        assert same_encoder(engine.main.model, model)
        spec = WhisperSpec(model, engine.main.processor)
        assert same_tokenizer(engine.spec, spec)
        helper = AssistantDecoder(DecoderStep(model, spec, "cpu", torch.float32))
        assert helper.share_encoder
        helper.set_window(enc.enc, None)
        got = engine.decoder.decode(enc.enc, opts, ModelDrafter(helper), enc.duration_s)
        assert list(got.tokens) == ref
        if perfect:
            assert got.stats.accepted == got.stats.drafted - 0
            assert got.stats.forward_passes <= len(ref) // 4 + 2
    # an assistant with its own encoder (here the same weights, run again from the features)
    own = AssistantDecoder(
        DecoderStep(weak, WhisperSpec(weak, engine.main.processor), "cpu", torch.float32),
        WhisperFrontEnd(weak, engine.main.processor, "cpu", torch.float32),
    )
    own.set_window(enc.enc, enc.features)
    got = engine.decoder.decode(enc.enc, opts, ModelDrafter(own), enc.duration_s)
    assert list(got.tokens) == ref


def test_loop_guard_bounds_tokens_on_reference_and_speculative_paths(engine, speech):
    """A tiny token budget forces the guard to cut both paths at the same token."""
    enc = engine.encode(speech["en_real_jfk"])
    opts = DecodingOptions(language="en", max_tokens_per_second=0.0, min_token_budget=5)
    ref, _ = reference_decode(engine.decoder, enc.enc, opts, enc.duration_s)
    got = engine.decoder.decode(enc.enc, opts, NoDrafter(), enc.duration_s)
    assert len(ref) == 5 and list(got.tokens) == ref
    assert got.stopped_by == "max_tokens"


def test_silence_has_high_no_speech_probability(engine, speech):
    res = engine.transcribe(speech["sv_real_silence_u0016001"], DecodingOptions(language="en"))
    speech_res = engine.transcribe(speech["en_real_forever"], DecodingOptions(language="en"))
    assert res.no_speech_prob > 0.5 > speech_res.no_speech_prob
    assert "forever" in speech_res.text.lower()


def test_fallback_paths_match_generate(engine, speech):
    """transformers' own decoder forward and the full fp32 projection (what non-Whisper-shaped
    decoders and GPUs use) decode to the same tokens as generate too."""
    from streamcap.decoding.screen import cpu_bf16_is_fast

    assert engine.decoder.step.lean is not None
    assert (engine.decoder.step.screen is not None) == cpu_bf16_is_fast()
    plain = SpeculativeDecoder(
        engine.main.model, engine.main.processor, "cpu", torch.float32, lean=False, screen=False
    )
    assert plain.step.lean is None and plain.step.screen is None
    opts = DecodingOptions(language="en")
    prev: tuple[int, ...] = ()
    for window in _windows(speech["en_real_librivox_0870"], 3.0):
        enc = engine.encode(window, context_s=len(window) / 16000 + 2.0)
        ref, _ = reference_decode(engine.decoder, enc.enc, opts, enc.duration_s)
        for dec in (plain, engine.decoder):
            got = dec.decode(
                enc.enc, opts, HypothesisDrafter(prev, eot=engine.spec.eot), enc.duration_s
            )
            assert list(got.tokens) == ref
        prev = tuple(got.tokens)


def test_screened_log_probabilities_match_fp32(engine, speech):
    """The hallucination guards read avg_logprob and no_speech_prob: the screened path must give
    what the full fp32 projection gives (speech and silence), not just the same tokens."""
    full = SpeculativeDecoder(
        engine.main.model, engine.main.processor, "cpu", torch.float32, screen=False
    )
    opts = DecodingOptions(language="en")
    for clip in ("en_real_jfk", "en_real_forever", "sv_real_silence_u0016001"):
        enc = engine.encode(speech[clip])
        got = engine.decoder.decode(enc.enc, opts, duration_s=enc.duration_s)
        want = full.decode(enc.enc, opts, duration_s=enc.duration_s)
        assert got.tokens == want.tokens
        assert abs(got.no_speech_prob - want.no_speech_prob) < 1e-3
        if want.avg_logprob is not None:
            assert abs(got.avg_logprob - want.avg_logprob) < 1e-3
