"""``--precision``: what is chosen per device and per half of the model, and that exactness
holds at the chosen precision (speculative output == plain greedy ``generate`` of the same
model at the same precision, token for token).

No GPU and no native bf16 on CI: CUDA and the native-bf16 probe are mocked for the selection
tests only. The bf16 runs are real (emulated bf16 on this CPU: slow, numerically valid), on
short clips with a shortened audio context (a full 30 s window takes ~12 s emulated). They
force ``--precision bf16`` (a bf16 encoder, an fp32 decoder) and each vocabulary projection:
the full fp32 one (``screen=False``) and the screen (``screen=True``: int8 for a few rows, bf16
for more), whatever this CPU's rules would pick.
"""

from __future__ import annotations

import argparse

import pytest
import torch

import streamcap.decoding.screen as screen
import streamcap.models.loader as loader
from streamcap.errors import UserError, user_message
from streamcap.models.loader import PlacementError, choose_placement


@pytest.fixture
def native_bf16(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - a setter
    """A CPU with (or without) native bf16: the screen's rule and the loader's probe."""

    def set_native(value: bool) -> None:
        monkeypatch.setattr(screen, "cpu_bf16_is_fast", lambda: value)
        monkeypatch.setattr(loader, "bf16_native", lambda: value)

    return set_native


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - a setter
    """A mocked GPU: only what selection asks (presence, bf16 support)."""

    def set_cuda(available: bool, bf16: bool = True) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)

    return set_cuda


# --------------------------------------------------------------------------- selection


def test_cpu_auto_is_measured_when_the_model_loads(cuda, native_bf16, monkeypatch) -> None:
    """On a CPU `auto` is decided by timing at load (`models.precision_probe`, driven in
    tests/models/test_precision_auto.py); here what each measured choice becomes."""
    from streamcap.models import precision_probe
    from streamcap.models.precision_probe import EncoderChoice

    cuda(False)
    native_bf16(True)
    p = choose_placement("auto", "auto")
    assert p.device == "cpu" and p.measured and p.precision == "auto"
    assert p.dtype == torch.float32 and p.dtype_name == "float32"  # the decoder's
    expected = {
        "fp32": ("fp32", torch.float32, ""),
        "bf16": ("bf16-encoder+fp32-decoder", torch.bfloat16, ""),
        "int8": ("int8-encoder+fp32-decoder", torch.float32, "int8"),
    }
    for name, (precision, enc_dtype, quant) in expected.items():
        choice = EncoderChoice(name, {"fp32": 1.0}, f"measured here: {name}")
        monkeypatch.setattr(precision_probe, "encoder_choice", lambda *a, c=choice, **k: c)
        got = loader.measured_placement("base", None, p)
        assert (got.precision, got.encoder_dtype, got.encoder_quant) == (
            precision,
            enc_dtype,
            quant,
        )
        assert got.dtype == torch.float32 and not got.measured and got.reason == choice.reason
    assert choose_placement("cpu", "fp32").precision == "fp32"


def test_cpu_bf16_asked_for_keeps_the_decoder_fp32(cuda, native_bf16) -> None:
    cuda(False)
    for native in (True, False):
        native_bf16(native)
        p = choose_placement("cpu", "bf16")
        assert (p.dtype, p.encoder_dtype) == (torch.float32, torch.bfloat16)
        assert ("emulated" in p.reason) is not native


def test_cuda_auto_is_fp16_and_bf16_needs_support(cuda, native_bf16) -> None:
    cuda(True)
    native_bf16(True)  # a CPU's bf16 does not matter on the GPU
    for precision in ("auto", "fp16"):
        p = choose_placement("auto", precision)
        assert (p.device, p.dtype, p.encoder_dtype, p.precision) == (
            "cuda",
            torch.float16,
            torch.float16,
            "fp16",
        )
    assert choose_placement("cuda:1", "fp32").precision == "fp32"
    assert choose_placement("cuda", "bf16").precision == "bf16"
    # the CPU's rule still holds for --device cpu on a machine with a GPU
    assert choose_placement("cpu", "auto").measured
    cuda(True, bf16=False)
    with pytest.raises(PlacementError, match="no bf16 support"):
        choose_placement("cuda", "bf16")


def test_fp16_on_cpu_is_refused_with_a_clear_user_error(cuda) -> None:
    cuda(False)
    with pytest.raises(PlacementError) as info:
        choose_placement("cpu", "fp16")
    assert isinstance(info.value, UserError) and isinstance(info.value, ValueError)
    assert user_message(info.value) == (
        "--precision fp16 needs a CUDA GPU: CPUs have no fast fp16 "
        "(on a CPU use bf16 or fp32, or auto)"
    )
    with pytest.raises(PlacementError, match="unknown precision 'int4'"):
        choose_placement("cpu", "int4")


def test_load_engine_refuses_before_the_model_loads(cuda, monkeypatch) -> None:
    import streamcap.runtime.engine as engine_module
    from streamcap.cli.model_options import ModelOptions, load_engine

    cuda(False)
    monkeypatch.setattr(engine_module, "Engine", lambda *a, **k: pytest.fail("model loaded"))
    with pytest.raises(UserError, match="needs a CUDA GPU"):
        load_engine(ModelOptions(device="auto", precision="fp16"))


def test_precision_flags_parse() -> None:
    from streamcap.cli import model_options
    from streamcap.cli.model_options import add_model_flags
    from streamcap.models import loader

    assert model_options.PRECISIONS == loader.PRECISIONS  # the parser's copy (kept import-light)

    one = argparse.ArgumentParser()
    add_model_flags(one)
    assert one.parse_args([]).precision == "auto"
    assert one.parse_args(["--precision", "BF16"]).precision == "bf16"
    with pytest.raises(SystemExit):
        one.parse_args(["--precision", "fp8"])
    several = argparse.ArgumentParser()
    add_model_flags(several, language=False, precisions=True)
    assert several.parse_args([]).precisions == ["auto"]
    args = several.parse_args(["--precision", "fp32,bf16,fp32"])
    assert args.precisions == ["fp32", "bf16"]


def test_models_command_says_the_precision_here(cuda, native_bf16) -> None:
    from streamcap.cli.models import precision_line

    cuda(False)
    native_bf16(False)
    assert precision_line().startswith("precision here (auto on cpu): the encoder's, measured")
    cuda(True)
    assert precision_line().startswith("precision here: fp16 on cuda")


# --------------------------------------------------------------------------- the mixed model


def test_mixed_encoder_hooks_let_transformers_run_the_encoder() -> None:
    """``generate(input_features=...)`` (an assistant with its own encoder) runs the encoder
    inside transformers: the hooks cast its input to bf16 and its output back to fp32. On a
    tiny random Whisper with a 20-frame window, so it is cheap."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    from streamcap.models.loader import mixed_precision_encoder

    torch.manual_seed(0)
    cfg = WhisperConfig(
        vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, num_mel_bins=80, max_source_positions=10, max_target_positions=32,
        decoder_start_token_id=1, pad_token_id=0, eos_token_id=2, bos_token_id=1,
    )  # fmt: skip
    model = WhisperForConditionalGeneration(cfg).eval()
    mixed_precision_encoder(model, torch.bfloat16)
    assert model.model.encoder.conv1.weight.dtype == torch.bfloat16
    assert model.model.decoder.embed_tokens.weight.dtype == torch.float32
    features = torch.randn(1, 80, 20)  # fp32 features (a full window here): cast on the way in
    with torch.inference_mode():
        enc = model.model.encoder(features).last_hidden_state
        assert enc.dtype == torch.float32
        ids = torch.tensor([[1, 5, 7]])
        direct = model(input_features=features, decoder_input_ids=ids).logits
        from transformers.modeling_outputs import BaseModelOutput

        given = model(encoder_outputs=BaseModelOutput(enc), decoder_input_ids=ids).logits
    assert torch.equal(direct, given)


# --------------------------------------------------------------------------- real speech, bf16

CLIPS = ["en_real_goforward", "en_real_praatio_mary"]  # short: emulated bf16 is slow


@pytest.fixture(scope="module")
def bf16_engine():  # noqa: ANN201 - an Engine (torch is slow to import)
    """The bundled base with a bf16 encoder and an fp32 decoder (emulated bf16 here), its
    decoder on the full fp32 projection (the screen forced off)."""
    from streamcap.runtime.engine import Engine

    torch.set_num_threads(2)
    return Engine("base", device="cpu", precision="bf16", screen=False)


@pytest.fixture(scope="module")
def bf16_screened(bf16_engine):  # noqa: ANN001, ANN201 - a SpeculativeDecoder
    """The same model's decoder with the vocabulary screen forced on."""
    from streamcap.decoding.speculative import SpeculativeDecoder

    e = bf16_engine
    return SpeculativeDecoder(e.main.model, e.main.processor, "cpu", torch.float32, screen=True)


@pytest.mark.model
def test_bf16_encoder_really_runs_in_bf16_and_the_decoder_in_fp32(bf16_engine, speech) -> None:
    e = bf16_engine
    assert e.precision == "bf16-encoder+fp32-decoder"
    assert e.placement.dtype == torch.float32 and e.placement.encoder_dtype == torch.bfloat16
    model = e.main.model
    assert {p.dtype for p in model.model.encoder.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.model.decoder.parameters()} == {torch.float32}
    assert model.proj_out.weight.dtype == torch.float32
    assert e.decoder.step.screen is None  # forced off
    audio = speech["en_real_praatio_mary"]
    enc = e.encode(audio, context_s=len(audio) / 16000 + 1.0)
    assert enc.features.dtype == torch.bfloat16  # the encoder's input
    assert enc.enc.dtype == torch.float32  # what the decoder and its caches see
    # computed in bf16, cast to fp32: every value has the low 16 mantissa bits of a bf16
    # (an fp32 encoder's output would not)
    bits = enc.enc.contiguous().view(torch.int32)
    assert bool(((bits & 0xFFFF) == 0).all())


@pytest.mark.model
@pytest.mark.parametrize("clip", CLIPS)
def test_bf16_speculative_is_token_identical_to_its_own_generate(
    bf16_engine, bf16_screened, speech, clip
) -> None:
    """A live replay in miniature: a partial at half the clip, then the whole clip; each
    decode (no draft, drafting from the previous hypothesis, and through the forced screen
    with no draft and with the exact answer as the draft) equals ``generate`` on the same
    bf16-encoded window; the screen's log-probabilities lie within its derived bound of the
    fp32 projection's."""
    from streamcap.core.decode_types import DecodingOptions
    from streamcap.decoding.drafters import HypothesisDrafter, NoDrafter
    from streamcap.decoding.reference import reference_decode

    e = bf16_engine
    kernels: set[str] = set()
    audio = speech[clip]
    opts = DecodingOptions(language="en")
    prev: tuple[int, ...] = ()
    for end in (len(audio) // 2, len(audio)):
        window = audio[:end]
        enc = e.encode(window, context_s=end / 16000 + 1.0)
        ref, _ = reference_decode(e.decoder, enc.enc, opts, enc.duration_s)
        loop = e.decode(enc, opts, drafter="none")
        spec = e.decode(enc, opts, hypothesis=prev, drafter="hypothesis")
        assert list(loop.tokens) == ref
        assert list(spec.tokens) == ref
        for drafter in (NoDrafter(), HypothesisDrafter(ref, eot=e.spec.eot)):
            got, bound = bf16_screened.decode_bounded(enc.enc, opts, drafter, enc.duration_s)
            assert list(got.tokens) == ref
            assert abs(got.no_speech_prob - loop.no_speech_prob) <= bound.no_speech_prob
            if ref:
                assert abs(got.avg_logprob - loop.avg_logprob) <= bound.avg_logprob
            kernels |= bound.kernels
        prev = spec.tokens
    assert kernels == {"int8", "bf16"}  # both of the screen's kernels ran
    assert ref, "the clip is speech: the final decode has tokens"
    if clip == "en_real_goforward":
        assert "forward" in e.spec.tokenizer.decode(ref).lower()
