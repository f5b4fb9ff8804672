"""Device and dtype are chosen once: CUDA + fp16 with a GPU, CPU + fp32 without."""

from __future__ import annotations

import pytest
import torch

from streamcap.models.loader import choose_placement


def test_cpu_here_is_fp32():
    placement = choose_placement("auto")
    if torch.cuda.is_available():  # pragma: no cover - no GPU on CI
        assert placement.device == "cuda" and placement.dtype == torch.float16
    else:
        assert placement.device == "cpu" and placement.dtype == torch.float32
    assert choose_placement("cpu").dtype == torch.float32


def test_gpu_choice_is_cuda_fp16(monkeypatch):
    """No GPU exists on this machine, so CUDA's presence is mocked (and only that)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    placement = choose_placement("auto")
    assert (placement.device, placement.dtype) == ("cuda", torch.float16)


def test_asking_for_a_missing_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        choose_placement("cuda")
    with pytest.raises(ValueError, match="unknown device"):
        choose_placement("tpu")
