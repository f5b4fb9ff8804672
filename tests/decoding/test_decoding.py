"""The speculative decoder returns exactly the main model's greedy ``generate`` output.

Real bundled Whisper base on real speech, for every drafter, including wrong and empty ones.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from streamcap.core.decode_types import DecodingOptions
from streamcap.decoding import HypothesisDrafter, NoDrafter
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
    decoders and GPUs use) decode to the same tokens as generate too. Forces the fp32
    projection (``screen=False``); the engine's own decoder has the screen as `auto` chose it
    here (timed) or the CPU's rule says."""
    from streamcap.decoding.screen import screen_is_default

    assert engine.decoder.step.lean is not None
    # the engine's own screen: as `auto` timed it here (`runtime.screen_probe`), else the rule
    chosen = engine.screen_choice
    expected = chosen.precision == "screen" if chosen is not None else screen_is_default()
    assert (engine.decoder.step.screen is not None) == expected
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


def test_screen_flag_forces_the_screen_either_way(engine, monkeypatch):
    """``screen=True`` on any CPU, ``False`` never, ``None`` as ``screen_is_default`` says
    (the one place of that rule); the screen needs an fp32 decoder on a CPU."""
    import streamcap.decoding.step as step_module

    model, spec = engine.main.model, engine.spec

    def step(screen: bool | None, dtype: torch.dtype = torch.float32) -> DecoderStep:
        return DecoderStep(model, spec, "cpu", dtype, lean=False, screen=screen)

    assert step(True).screen is not None and step(False).screen is None
    for default in (True, False):
        monkeypatch.setattr(step_module, "screen_is_default", lambda default=default: default)
        assert (step(None).screen is not None) is default
        assert step(None, torch.bfloat16).screen is None  # auto: only where it applies
    with pytest.raises(ValueError, match="fp32 decoder"):
        step(True, torch.bfloat16)


#: the screen's kernel split, forced: ``int8_rows`` of each (every verify call has <= 9 rows)
SCREENS = {"int8": 16, "bf16": 0, "int8+bf16": 4}


def forced_screen(decoder: SpeculativeDecoder, int8_rows: int) -> SpeculativeDecoder:
    """``decoder`` (its screen on) with the screen's int8/bf16 split forced: a shallow copy,
    sharing the model and the screen's weight copies."""
    assert decoder.step.screen is not None
    forced = copy.copy(decoder)
    forced.step = copy.copy(decoder.step)
    forced.step.screen = copy.copy(decoder.step.screen)
    forced.step.screen.int8_rows = int8_rows
    return forced


@pytest.fixture(scope="module")
def screen_cases(engine, speech):
    """Short windows of real speech and silence (encoder context: the audio + 1 s), each with
    its ``generate`` reference and drafters, and a decode of each through the full fp32
    projection (``screen=False``) for the log-probabilities."""
    full = SpeculativeDecoder(
        engine.main.model, engine.main.processor, "cpu", torch.float32, screen=False
    )
    opts = DecodingOptions(language="en")
    eot = engine.spec.eot
    cases = []
    for clip in ("en_real_forever", "en_real_praatio_mary", "sv_real_silence_u0016001"):
        audio = speech[clip]
        enc = engine.encode(audio, context_s=len(audio) / 16000 + 1.0)
        ref, _ = reference_decode(engine.decoder, enc.enc, opts, enc.duration_s)
        drafters = {  # one- or two-row steps, verify calls of 9 rows
            "none": lambda: NoDrafter(),
            "exact answer": lambda ref=ref: HypothesisDrafter(ref, eot=eot),
        }
        fp32 = {
            name: full.decode(enc.enc, opts, make(), enc.duration_s)
            for name, make in drafters.items()
        }
        cases.append((clip, enc, ref, drafters, fp32))
    return opts, cases


@pytest.fixture(scope="module")
def screened(engine) -> SpeculativeDecoder:
    """The engine's model with the vocabulary screen forced on, whatever this CPU's rule."""
    return SpeculativeDecoder(
        engine.main.model, engine.main.processor, "cpu", torch.float32, screen=True
    )


@pytest.mark.parametrize("kernels", list(SCREENS))
def test_forced_screen_is_exact_and_within_its_logprob_bound(screened, screen_cases, kernels):
    """The vocabulary screen forced on (``screen=True``), with each int8/bf16 split forced:
    tokens equal ``generate``'s for every drafter, and avg_logprob and no_speech_prob (the
    hallucination guards read them) lie within the bound ``screen.py`` derives of what the full
    fp32 projection gives."""
    dec = forced_screen(screened, SCREENS[kernels])
    opts, cases = screen_cases
    used: set[str] = set()
    for clip, enc, ref, drafters, fp32 in cases:
        bounded = {}
        for name, make in drafters.items():
            got, bound = bounded[name] = dec.decode_bounded(enc.enc, opts, make(), enc.duration_s)
            want = fp32[name]
            assert list(got.tokens) == ref, f"{clip}: drafter {name} diverged"
            assert got.tokens == want.tokens
            assert abs(got.no_speech_prob - want.no_speech_prob) <= bound.no_speech_prob
            # the bounds are not vacuous (base here: avg_logprob ~1e-2 int8, ~3e-3 bf16;
            # more where the int8 kernel rounds dequantized weights to bf16, screen.py)
            assert bound.no_speech_prob < 0.05
            if want.avg_logprob is not None:
                assert abs(got.avg_logprob - want.avg_logprob) <= bound.avg_logprob, clip
                assert bound.avg_logprob < (1.0 if "int8" in bound.kernels else 0.05)
            used |= bound.kernels
        # the bound is of what ``decode`` returns (the same values, unbounded)
        plain = dec.decode(enc.enc, opts, drafters["none"](), enc.duration_s)
        same, _ = bounded["none"]
        assert (plain.tokens, plain.avg_logprob, plain.no_speech_prob) == (
            same.tokens,
            same.avg_logprob,
            same.no_speech_prob,
        )
    assert used == set(kernels.split("+"))  # each forced kernel really ran, and only those
    assert cases[-1][4]["none"].no_speech_prob > 0.5  # the silence
