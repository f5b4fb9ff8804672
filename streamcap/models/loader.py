"""Load a Whisper model on the right device and dtype, once."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

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
    from transformers.utils import logging as hf_logging

    path = resolve(name)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # the weight-loading bar is noise for us
    is_hub_id = not os.path.isdir(path)
    try:
        try:
            return _load(name, path, placement, local_only=is_hub_id)
        except OSError:
            if not is_hub_id:
                raise
        if not hub_reachable():
            raise ModelNotFoundError(
                f"cannot download {name!r}: the Hugging Face hub is not reachable (no network?). "
                "Use a bundled model (base, tiny.en) or a local model folder"
            )
        return _load(name, path, placement, local_only=False)
    except OSError as exc:
        raise ModelNotFoundError(
            f"could not load model {name!r}: {str(exc).splitlines()[0]} "
            "(a hub id needs network access; bundled models: base, tiny.en)"
        ) from exc


def _load(name: str, path: str, placement: Placement, *, local_only: bool) -> LoadedModel:
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    processor = WhisperProcessor.from_pretrained(path, local_files_only=local_only)
    # typed loosely: transformers' decorated ``to`` confuses type checkers
    model: Any = WhisperForConditionalGeneration.from_pretrained(
        path, dtype=placement.dtype, attn_implementation="sdpa", local_files_only=local_only
    )
    model.to(placement.device)
    model.eval()
    return LoadedModel(name, path, model, processor, placement)


def hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP check, so an offline machine fails in seconds, not after minutes of retries."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
