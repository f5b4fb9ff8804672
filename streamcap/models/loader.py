"""Load a Whisper model on the right device and dtype, once."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from streamcap.errors import UserError
from streamcap.models.registry import ModelNotFoundError, resolve

if TYPE_CHECKING:
    import torch

__all__ = ["LoadedModel", "Placement", "PlacementError", "choose_placement", "load_model"]

#: ``--precision`` values: ``auto`` picks per device and per half of the model (see below).
PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


class PlacementError(UserError, ValueError):
    """A device or precision that cannot be used here (one line for the user to act on).

    Also a ``ValueError``: callers that predate `UserError` caught that.
    """


@dataclass(frozen=True)
class Placement:
    """Device and dtypes chosen once for every tensor the models create.

    ``dtype_name`` is the decoder's (and the load dtype of the model: KV caches, logits and
    everything downstream of the encoder use it); ``encoder_dtype_name`` is the encoder's,
    which may be lower (bf16 on CPUs with native bf16: the encoder is one large batched pass
    that bf16 speeds up 2.5x, while one-token decoder steps got 1.75x *slower* in bf16).
    """

    device: str
    dtype_name: str
    encoder_dtype_name: str = ""  # "" = dtype_name
    #: "int8": the encoder's Linear layers dynamically quantised (`models.quantize`), a CPU's
    #: fp32 encoder otherwise; "" = none.
    encoder_quant: str = ""
    #: The encoder's precision is chosen at load by timing (`models.precision_probe`): the
    #: loaded model's placement says what was chosen.
    measured: bool = False
    #: Why this precision (for `streamcap models` and the loading note); not compared.
    reason: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.encoder_dtype_name:
            object.__setattr__(self, "encoder_dtype_name", self.dtype_name)

    @property
    def dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.dtype_name)

    @property
    def encoder_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.encoder_dtype_name)

    @property
    def mixed(self) -> bool:
        """True when the encoder runs at another dtype than the decoder."""
        return self.encoder_dtype_name != self.dtype_name

    @property
    def precision(self) -> str:
        """Short description: ``fp32``, ``fp16``, ``bf16``, ``bf16-encoder+fp32-decoder``,
        ``int8-encoder+fp32-decoder``, or ``auto`` before a load has measured."""
        if self.measured:
            return "auto"
        dec = _SHORT.get(self.dtype_name, self.dtype_name)
        enc = self.encoder_quant or _SHORT.get(self.encoder_dtype_name, self.encoder_dtype_name)
        return dec if enc == dec else f"{enc}-encoder+{dec}-decoder"


def choose_placement(device: str = "auto", precision: str = "auto") -> Placement:
    """The device (CUDA when a GPU is present or asked for, else CPU) and its dtypes.

    ``precision`` (``--precision``):

    - ``auto``: on CUDA fp16 for both halves; on a CPU an fp32 decoder and the encoder at the
      precision measured fastest here when the model loads (`models.precision_probe`: fp32,
      bf16 where oneDNN runs it natively, int8 for models whose int8 accuracy was measured;
      cached per machine). CPU flags alone do not say: the bf16 encoder was 2.5x faster with
      AMX (0.29 s vs 0.71 s per 30 s window), slower on an Intel CPU with AVX512-BF16 alone
      (0.75 s vs 0.59 s), faster on an AMD EPYC with AVX512-BF16. Greedy decoding was 1.75x
      slower in bf16 than fp32 (small one-token matmuls gain nothing, the casts cost), so the
      decoder stays fp32.
    - ``int8``: CPU only: the encoder's Linear layers dynamically quantised to int8
      (`models.quantize`), fp32 decoder.
    - ``fp32``: fp32 everywhere.
    - ``bf16``: on CUDA bf16 for both halves (where the GPU supports it); on a CPU a bf16
      encoder and an fp32 decoder, native or not (without native bf16 it is emulated: slow).
    - ``fp16``: CUDA only (CPUs have no fast fp16 matmuls): PlacementError on a CPU.
    """
    import torch

    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise PlacementError(f"unknown device {device!r} (use auto, cpu or cuda)")
    if precision not in PRECISIONS:
        raise PlacementError(f"unknown precision {precision!r} (use {', '.join(PRECISIONS)})")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PlacementError("--device cuda was asked for but no CUDA GPU is available")
    if device.startswith("cuda"):
        if precision == "int8":
            raise PlacementError("--precision int8 is for CPUs (on a GPU use fp16 or auto)")
        if precision in ("auto", "fp16"):
            return Placement(device, "float16", reason="CUDA: fp16")
        if precision == "fp32":
            return Placement(device, "float32", reason="asked for")
        if not torch.cuda.is_bf16_supported():
            raise PlacementError(
                "--precision bf16: this GPU has no bf16 support (use fp16 or fp32)"
            )
        return Placement(device, "bfloat16", reason="asked for")
    if precision == "fp16":
        raise PlacementError(
            "--precision fp16 needs a CUDA GPU: CPUs have no fast fp16 "
            "(on a CPU use bf16 or fp32, or auto)"
        )
    if precision == "fp32":
        return Placement(device, "float32", reason="asked for")
    if precision == "int8":
        return Placement(device, "float32", encoder_quant="int8", reason="asked for")
    if precision == "bf16":
        native = bf16_native()
        why = "asked for" if native else "asked for; this CPU has no native bf16: emulated, slow"
        return Placement(device, "float32", "bfloat16", reason=why)
    return Placement(device, "float32", measured=True, reason="measured when the model loads")


def bf16_native() -> bool:
    """`decoding.screen.cpu_bf16_native`, imported when asked (torch): bf16 is then a candidate
    worth timing."""
    from streamcap.decoding.screen import cpu_bf16_native

    return cpu_bf16_native()


def measured_placement(name: str, model: Any, placement: Placement) -> Placement:
    """`placement` (``auto`` on a CPU) resolved by timing `model`'s encoder here (cached)."""
    from streamcap.models.precision_probe import encoder_choice

    choice = encoder_choice(name, model, bf16_native=bf16_native())
    if choice.precision == "bf16":
        return Placement(placement.device, "float32", "bfloat16", reason=choice.reason)
    if choice.precision == "int8":
        return Placement(placement.device, "float32", encoder_quant="int8", reason=choice.reason)
    return Placement(placement.device, "float32", reason=choice.reason)


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
    if placement.measured:  # `auto` on a CPU: the encoder's precision by timing
        placement = measured_placement(name, model, placement)
    if placement.encoder_quant == "int8":
        from streamcap.models.quantize import int8_encoder

        int8_encoder(model.model.encoder)
    elif placement.mixed:
        mixed_precision_encoder(model, placement.encoder_dtype)
    return LoadedModel(name, path, model, processor, placement)


def mixed_precision_encoder(model: Any, dtype: torch.dtype) -> None:
    """Run ``model``'s encoder at ``dtype`` while its decoder keeps the model's dtype.

    The encoder's weights are cast; two hooks cast its input features to ``dtype`` and its
    output back to the decoder's dtype, so transformers' own ``generate`` (which runs the
    encoder itself when given ``input_features``, e.g. with an assistant) works unchanged.
    `WhisperFrontEnd` casts the same way on its hand-run shortened-context path.
    """
    encoder = model.model.encoder
    out_dtype = model.model.decoder.embed_tokens.weight.dtype
    encoder.to(dtype)

    def cast_in(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if args and hasattr(args[0], "to"):
            args = (args[0].to(dtype), *args[1:])
        if kwargs.get("input_features") is not None:
            kwargs["input_features"] = kwargs["input_features"].to(dtype)
        return args, kwargs

    def cast_out(module: Any, args: Any, output: Any) -> Any:
        hidden = getattr(output, "last_hidden_state", None)
        if hidden is not None:
            output.last_hidden_state = hidden.to(out_dtype)
        elif isinstance(output, tuple) and output:
            output = (output[0].to(out_dtype), *output[1:])
        return output

    encoder.register_forward_pre_hook(cast_in, with_kwargs=True)
    encoder.register_forward_hook(cast_out)


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
