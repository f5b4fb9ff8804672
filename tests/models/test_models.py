"""The bundled CTranslate2 weights convert into a Hugging Face checkpoint that decodes like
CTranslate2 itself, fed the same log-mel features; a second start reuses the cache.

CTranslate2 runs fp32 here, so the comparison forces ``--precision fp32`` (an fp32 encoder:
its log-mel features are fp32 too, as CTranslate2 takes them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from streamcap.core.decode_types import DecodingOptions
from streamcap.models.registry import ModelNotFoundError, ctranslate2_folder, resolve
from streamcap.runtime.engine import Engine

ctranslate2 = pytest.importorskip("ctranslate2")

CLIPS = ["en_real_jfk", "en_real_librivox_0870", "en_real_goforward", "en_real_praatio_mary"]


@pytest.mark.parametrize("name", ["base", "tiny.en"])
def test_converted_model_decodes_like_ctranslate2(name, speech, tmp_path, engine):
    # forced fp32 (the session's engine where it is fp32 already: one load less)
    fp32 = name == "base" and engine.precision == "fp32"
    ours = engine if fp32 else Engine(name, device="cpu", precision="fp32")
    assert ours.precision == "fp32"
    ct2 = ctranslate2.models.Whisper(str(ctranslate2_folder(name, tmp_path)), device="cpu")
    spec = ours.spec
    prefix = spec.prefix(spec.language_id("en") if spec.multilingual else None, DecodingOptions())
    for clip in CLIPS:
        features = ours.frontend.features(speech[clip])  # the same log-mel for both
        result = ct2.generate(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(features.numpy())),
            [prefix],
            beam_size=1,
            max_length=448,
            suppress_blank=True,
            suppress_tokens=[-1],
        )[0]
        ct2_tokens = [t for t in result.sequences_ids[0] if t != spec.eot]
        enc = ours.frontend.encode(features)
        got = ours.decoder.decode(
            enc, DecodingOptions(language="en" if spec.multilingual else None)
        )
        assert list(got.tokens) == ct2_tokens, f"{name} {clip}"
    assert "country" in ours.transcribe(speech["en_real_jfk"]).text


def test_second_start_reuses_the_cache(tmp_path):
    """A fresh process converts into an empty cache once; the next start converts nothing."""
    env = {**os.environ, "STREAMCAP_CACHE": str(tmp_path)}
    code = (
        "import time; from streamcap.models.registry import resolve; "
        "t = time.perf_counter(); p = resolve('tiny.en'); print(p, time.perf_counter() - t)"
    )
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    path = Path(first.stdout.split()[0])
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    # the progress bar (rich, transient) draws only on a terminal: stderr here has none
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert second.returncode == 0
    assert "preparing" not in second.stderr
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    assert sorted(p.name for p in path.iterdir()) == sorted(
        [
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "preprocessor_config.json",
            "streamcap.json",
            "tokenizer.json",
            "tokenizer_config.json",
        ]
    )


def test_model_names_resolve_or_fail_clearly(tmp_path):
    assert resolve("openai/whisper-large-v3") == "openai/whisper-large-v3"
    with pytest.raises(ModelNotFoundError, match="unknown model"):
        resolve("large-v9")
    with pytest.raises(ModelNotFoundError, match="no such model folder"):
        resolve("./no/such/folder")
    with pytest.raises(ModelNotFoundError, match="config.json"):
        resolve(str(tmp_path))
