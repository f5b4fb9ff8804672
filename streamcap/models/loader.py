"""Load a Whisper model on the right device and dtype, once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamcap.models.registry import ModelNotFoundError, resolve

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Placement:
    """Device and dtype chosen once for every tensor the models create."""

    device: str
    dtype_name: str

    @property
    def dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.dtype_name)


def choose_placement(device: str = "auto") -> Placement:
    """CUDA + fp16 where a GPU is present (or asked for), else CPU + fp32."""
    import torch

    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"unknown device {device!r} (use auto, cpu or cuda)")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for but no CUDA GPU is available")
    return Placement(device, "float16" if device.startswith("cuda") else "float32")


@dataclass(frozen=True)
class LoadedModel:
    name: str
    path: str
    model: Any  # WhisperForConditionalGeneration
    processor: Any  # WhisperProcessor
    placement: Placement


def load_model(name: str, placement: Placement) -> LoadedModel:
    """Resolve ``name`` (bundled, local folder or hub id) and load model + processor."""
    from transformers import WhisperForConditionalGeneration, WhisperProcessor
    from transformers.utils import logging as hf_logging

    path = resolve(name)
    hf_logging.set_verbosity_error()  # the weight-loading progress bar is noise for us
    try:
        processor = WhisperProcessor.from_pretrained(path)
        model = WhisperForConditionalGeneration.from_pretrained(
            path, dtype=placement.dtype, attn_implementation="sdpa"
        )
    except OSError as exc:
        raise ModelNotFoundError(
            f"could not load model {name!r}: {str(exc).splitlines()[0]} "
            "(a hub id needs network access; bundled models: base, tiny.en)"
        ) from exc
    model.to(placement.device)
    model.eval()
    return LoadedModel(name, path, model, processor, placement)
