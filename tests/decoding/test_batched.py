"""Decoder steps of several windows in one batch give every row its batch-1 greedy tokens.

Real bundled Whisper base on real speech: rows of different clips (lengths), drafts (a correct
hypothesis, a wrong one, a stale one, none), options (detected language, prompt, translate),
full and shortened encoder contexts in one batch, rows finishing at different passes; the
re-decision at batch 1 (every token, with an infinite margin); the batched encoder helper.
"""

from __future__ import annotations

import math

import pytest
import torch

from streamcap.core.decode_types import DecodingOptions
from streamcap.decoding import HypothesisDrafter, NoDrafter
from streamcap.decoding.batched import MARGIN, MEASURED_LOGIT_DIFF, BatchedDecoder
from streamcap.decoding.batched_encode import context_positions, encode_windows
from streamcap.decoding.batched_lean import Segment, forward_packed
from streamcap.decoding.drafters import FixedDrafter
from streamcap.decoding.reference import reference_decode
from streamcap.decoding.spec import DecodingError
from streamcap.decoding.speculative import SpeculativeDecoder
from streamcap.decoding.verify import DraftLength

EN = DecodingOptions(language="en")
# (clip, encoder context: None = the full 30 s, else seconds)
ROWS = [
    ("en_real_jfk", None),
    ("en_real_librivox_0870", None),
    ("en_real_forever", 6.0),
    ("en_real_praatio_mary", 4.0),
    ("en_real_librivox_0880", 5.0),
    ("sv_real_silence_u0016001", None),
]


@pytest.fixture(scope="module")
def windows(engine, speech):
    """Each row's encoder output (batched per context, as a worker would) and its reference."""
    encoded = encode_windows(engine.frontend, [(speech[c], ctx) for c, ctx in ROWS])
    refs = [reference_decode(engine.decoder, w.enc, EN, w.duration_s)[0] for w in encoded]
    return encoded, refs


def _drafters(engine, refs):
    eot = engine.spec.eot
    return [
        HypothesisDrafter(refs[0], eot=eot),  # the exact answer
        FixedDrafter([220, 50257, 1000, 2000] * 40),  # wrong everywhere
        None,  # no drafter
        HypothesisDrafter(refs[3][:2]),  # a stale partial
        HypothesisDrafter(refs[4][2:] + refs[4][:2]),  # shifted
        HypothesisDrafter([]),
    ]


def test_rows_equal_batch1_and_generate(engine, windows):
    """Batched rows (always the full fp32 projection) against batch-1 decodes of the engine's
    decoder (the vocabulary screen as this CPU's rule says): the same tokens and passes, and
    log-probabilities within the derived bound of their difference: the batch-1 screen's
    (``decode_bounded``, 0 without a screen) plus 2 x the largest batched logit difference
    (a log-softmax moves by at most twice its logits' largest change)."""
    encoded, refs = windows
    assert [w.enc.shape[1] for w in encoded] == [1500, 1500, 300, 200, 250, 1500]
    batched = BatchedDecoder(engine.decoder, probe=True)
    out = batched.decode_batch_counted(
        [w.enc for w in encoded],
        [EN] * len(ROWS),
        _drafters(engine, refs),
        [w.duration_s for w in encoded],
    )
    singles = [
        engine.decoder.decode_bounded(w.enc, EN, d, w.duration_s)
        for w, d in zip(encoded, _drafters(engine, refs), strict=True)
    ]
    passes = set()
    for (clip, _), got, (single, bound), ref in zip(ROWS, out, singles, refs, strict=True):
        res = got.result
        assert list(res.tokens) == ref, clip
        assert res.tokens == single.tokens and res.text == single.text, clip
        assert res.stopped_by == single.stopped_by == "eot"
        # the same algorithm: the same drafts, acceptances and passes as batch 1
        assert res.stats.drafted == single.stats.drafted, clip
        assert res.stats.accepted == single.stats.accepted, clip
        assert res.stats.forward_passes == single.stats.forward_passes, clip
        # the margin stays a safe multiple of what batching changes in the logits
        assert 0 <= got.counters.max_logit_diff < MARGIN / 8, clip
        batching = 2 * got.counters.max_logit_diff
        assert abs(res.avg_logprob - single.avg_logprob) <= bound.avg_logprob + batching, clip
        # the <|sot|> row is not probed: the measured batching difference stands for it
        sot = bound.no_speech_prob + 2 * MEASURED_LOGIT_DIFF
        assert abs(res.no_speech_prob - single.no_speech_prob) <= sot, clip
        assert got.counters.choices >= len(ref) + 1
        passes.add(res.stats.forward_passes)
    assert len(passes) > 2, "rows should leave the batch at different passes"
    assert "country" in out[0].result.text and out[5].result.no_speech_prob > 0.5
    # the same against batch-1 decodes through the screen forced on, whatever this CPU's rule
    screened = SpeculativeDecoder(
        engine.main.model, engine.main.processor, "cpu", torch.float32, screen=True
    )
    kernels: set[str] = set()
    for i in (0, 2):  # the exact answer as the draft (9-row bf16 calls), no drafter (int8)
        w, got = encoded[i], out[i]
        single, bound = screened.decode_bounded(w.enc, EN, _drafters(engine, refs)[i], w.duration_s)
        assert single.tokens == got.result.tokens
        slack = bound.avg_logprob + 2 * got.counters.max_logit_diff
        assert abs(got.result.avg_logprob - single.avg_logprob) <= slack
        slack = bound.no_speech_prob + 2 * MEASURED_LOGIT_DIFF
        assert abs(got.result.no_speech_prob - single.no_speech_prob) <= slack
        kernels |= bound.kernels
    assert kernels == {"int8", "bf16"}


def test_every_token_decided_again_at_batch1(engine, windows):
    """An infinite margin re-decides every batched choice at batch 1: same tokens."""
    encoded, refs = windows
    rows = [0, 2, 4]
    drafters = _drafters(engine, refs)
    out = BatchedDecoder(engine.decoder, margin=math.inf).decode_batch_counted(
        [encoded[i].enc for i in rows],
        [EN] * len(rows),
        [drafters[i] for i in rows],
        [encoded[i].duration_s for i in rows],
    )
    for i, got in zip(rows, out, strict=True):
        assert list(got.result.tokens) == refs[i]
        assert got.counters.choices >= got.counters.rechecked >= len(refs[i]) + 1
        assert got.counters.changed == 0
        # each position (forced prefix, then every token) ran at batch 1 exactly once
        assert got.counters.recheck_tokens == 4 + len(refs[i])


def test_options_per_row_and_batch_of_one(engine, windows):
    encoded, refs = windows
    short, other = encoded[4], encoded[2]  # shortened contexts: cheap references
    prompt = engine.text_to_ids("Mr. Dashwood, Norland.")
    opts = [
        DecodingOptions(language=None),
        DecodingOptions(language="en", prompt_ids=prompt),
        DecodingOptions(language="en", task="translate", max_draft=4, initial_draft=2),
        DecodingOptions(language="en", max_tokens_per_second=0.0, min_token_budget=3),
    ]
    encs = [short, other, short, other]
    k = DraftLength(k=2, k_max=4)
    out = BatchedDecoder(engine.decoder).decode_batch(
        [e.enc for e in encs],
        opts,
        [None, FixedDrafter(refs[2][1:]), HypothesisDrafter(refs[4]), NoDrafter()],
        [e.duration_s for e in encs],
        draft_lengths=[None, None, k, None],
    )
    for got, o, e in zip(out, opts, encs, strict=True):
        ref, _ = reference_decode(engine.decoder, e.enc, o, e.duration_s)
        assert list(got.tokens) == ref
    assert out[0].language == "en" and out[0].no_speech_prob < 0.5
    single_en = engine.decoder.decode(short.enc, opts[0], None, short.duration_s)
    assert out[0].language_prob == pytest.approx(single_en.language_prob, abs=0.02)
    assert out[1].language_prob is None  # told, not detected
    assert out[3].stopped_by == "max_tokens" and len(out[3].tokens) == 3
    assert k.drafted_ewma > 0  # the row's DraftLength learnt from this decode
    # a batch of one is the batch-1 decode (log-probabilities: that of the fp32 projection,
    # within the batch-1 screen's bound and the measured batching difference, x 2)
    alone = BatchedDecoder(engine.decoder).decode_batch([short.enc], [EN], [None], [3.0])
    single, bound = engine.decoder.decode_bounded(short.enc, EN, None, 3.0)
    assert alone[0].tokens == single.tokens
    assert alone[0].stats.forward_passes == single.stats.forward_passes
    slack = bound.avg_logprob + 2 * MEASURED_LOGIT_DIFF
    assert abs(alone[0].avg_logprob - single.avg_logprob) <= slack


def test_errors_and_empty_batch(engine, windows):
    encoded, _ = windows
    batched = BatchedDecoder(engine.decoder)
    assert batched.decode_batch([], [], [], []) == []
    with pytest.raises(DecodingError):
        batched.decode_batch(
            [encoded[0].enc] * 2, [EN, DecodingOptions(language="xx")], [None] * 2, [3.0] * 2
        )
    with pytest.raises(ValueError, match="one option"):
        batched.decode_batch([encoded[0].enc], [EN, EN], [None], [3.0])


@torch.inference_mode()
def test_packed_forward_one_row_is_lean_and_rows_stay_close(engine, windows):
    """One packed row is the batch-1 lean step bit for bit; packed rows stay within the
    measured difference of their batch-1 steps."""
    encoded, refs = windows
    lean = engine.decoder.step.lean
    prefix = engine.spec.prefix(engine.spec.language_id("en"), EN)
    rows = (2, 3, 4)  # shortened contexts: cheap cross-attention keys/values
    seqs = [prefix + refs[i] for i in rows]
    a, b = lean.new_cache(), lean.new_cache()
    want = lean.forward(seqs[0][:9], a, encoded[2].enc)
    got = forward_packed(lean, [Segment(seqs[0][:9], b, encoded[2].enc)])[0]
    assert torch.equal(want, got) and a.length == b.length == 9
    singles = [lean.new_cache() for _ in seqs]
    packed = [lean.new_cache() for _ in seqs]
    pos = [0, 0, 0]
    logits = engine.decoder.step.logits
    for sizes in ([4, 4, 1], [1, 1, 8], [2, 1, 1], [1, 3, 2]):
        segs, wants = [], []
        for r, n in enumerate(sizes):
            chunk = seqs[r][pos[r] : pos[r] + n]
            assert len(chunk) == n
            pos[r] += n
            enc = encoded[rows[r]].enc
            wants.append(lean.forward(chunk, singles[r], enc))
            segs.append(Segment(chunk, packed[r], enc))
        for w, g in zip(wants, forward_packed(lean, segs), strict=True):
            assert float((logits(w) - logits(g)).abs().max()) < MARGIN / 8
    assert [c.length for c in packed] == pos
    with pytest.raises(ValueError, match="at least one"):
        forward_packed(lean, [Segment([], lean.new_cache(), encoded[2].enc)])


@pytest.fixture(scope="module")
def engines(engine):  # type: ignore[no-untyped-def]
    """Base at each encoder precision the batched encoder is checked at, forced (`auto` picks
    by timing, so the session's engine is fp32 on one CPU and bf16 on another)."""
    from streamcap.runtime.engine import Engine

    out = {}
    for name in ("fp32", "bf16"):  # bf16 is emulated where the CPU has no native bf16
        same = engine.precision == name or engine.precision.startswith(f"{name}-encoder")
        out[name] = engine if same else Engine("base", device="cpu", precision=name)
    return out


def _rms(x: torch.Tensor) -> float:
    return float(x.float().pow(2).mean().sqrt())


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_batched_encoder(engines, speech, precision):  # type: ignore[no-untyped-def]
    """Windows of one context length encoded as one batch: each row is its own window's
    encoding. In fp32 to 1e-3; in bf16 a batch rounds differently from a single call (its
    matrix products are blocked differently: up to 0.3 apart here), so the contract there is
    that batching adds no error of its own: each row is as close to the fp32 encoding as the
    single bf16 call is (RMS within 25 %)."""
    engine = engines[precision]
    assert engine.precision.startswith(precision)  # "bf16-encoder+fp32-decoder" for bf16
    audio = [speech["en_real_forever"], speech["en_real_praatio_mary"], speech["en_real_jfk"]]
    assert context_positions(len(audio[0]), None) is None
    assert context_positions(len(audio[0]), 6.0) == 300
    assert context_positions(len(audio[2]), 6.0) == 550  # never shorter than the audio
    assert context_positions(len(audio[2]), 40.0) is None
    got = encode_windows(engine.frontend, [(audio[0], 6.0), (audio[1], 6.0), (audio[2], 6.0)])
    assert [w.enc.shape[1] for w in got] == [300, 300, 550]
    for a, w in zip(audio, got, strict=True):
        single = engine.encode(a, context_s=6.0)
        assert w.positions == single.enc.shape[1] and w.duration_s == single.duration_s
        assert torch.equal(w.features, single.features)
        if precision == "fp32":
            assert float((w.enc - single.enc).abs().max()) < 1e-3
        else:
            fp32 = engines["fp32"].encode(a, context_s=6.0).enc.float()
            assert _rms(w.enc - fp32) <= 1.25 * _rms(single.enc - fp32) + 1e-6
    # a group of one is exactly the single call
    alone = encode_windows(engine.frontend, [(audio[2], 6.0)])[0]
    assert torch.equal(alone.enc, engine.encode(audio[2], context_s=6.0).enc)
    with pytest.raises(ValueError, match="30 s"):
        encode_windows(engine.frontend, [(speech["en_real_jfk"].repeat(3), None)])
