"""The same code on a CUDA GPU: fp16 + SDPA, exact speculative and batched decoding.

Runs only where a CUDA GPU is present (`scripts/gpu_check.sh`); this CPU machine and CI have
none, so here every test is skipped, and says why.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from streamcap.core.decode_types import DecodingOptions
from streamcap.decoding import HypothesisDrafter, NoDrafter
from streamcap.decoding.batched import BatchedDecoder
from streamcap.decoding.reference import reference_decode

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.model,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine"),
]

CLIPS = ["en_real_jfk", "en_real_librivox_0870", "en_real_forever", "en_real_praatio_mary"]
EN = DecodingOptions(language="en")


@pytest.fixture(scope="module")
def gpu_engine() -> Any:
    from streamcap.runtime.engine import Engine

    return Engine("base", device="cuda")


def test_auto_picks_fp16_and_sdpa_on_cuda(gpu_engine: Any) -> None:
    assert gpu_engine.precision == "fp16"
    model = gpu_engine.main.model
    assert model.dtype == torch.float16 and model.device.type == "cuda"
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("clip", CLIPS)
def test_speculative_equals_generate_in_fp16(
    gpu_engine: Any, speech: dict[str, np.ndarray], clip: str
) -> None:
    audio = speech[clip]
    prev: tuple[int, ...] = ()
    for end in [*range(32000, len(audio), 32000), len(audio)]:
        enc = gpu_engine.encode(audio[:end])
        ref, _ = reference_decode(gpu_engine.decoder, enc.enc, EN, enc.duration_s)
        for drafter in (NoDrafter(), HypothesisDrafter(prev, eot=gpu_engine.spec.eot)):
            got = gpu_engine.decoder.decode(enc.enc, EN, drafter, duration_s=enc.duration_s)
            assert list(got.tokens) == ref, clip
        prev = tuple(ref)


def test_batched_rows_equal_batch_one_greedy_in_fp16(
    gpu_engine: Any, speech: dict[str, np.ndarray]
) -> None:
    encs = [gpu_engine.encode(speech[c]) for c in CLIPS]
    refs = [reference_decode(gpu_engine.decoder, e.enc, EN, e.duration_s)[0] for e in encs]
    drafters = [
        None,
        HypothesisDrafter(refs[1], eot=gpu_engine.spec.eot),
        HypothesisDrafter(refs[0], eot=gpu_engine.spec.eot),  # another clip's words
        HypothesisDrafter(refs[3][:2], eot=gpu_engine.spec.eot),
    ]
    batched = BatchedDecoder(gpu_engine.decoder)
    results = batched.decode_batch(
        [e.enc for e in encs], [EN] * 4, drafters, [e.duration_s for e in encs]
    )
    for clip, res, ref in zip(CLIPS, results, refs, strict=True):
        assert list(res.tokens) == ref, clip
