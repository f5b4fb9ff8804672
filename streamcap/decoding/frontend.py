"""Whisper's front end: log-mel features and the encoder, with a shortened audio context.

Kept apart from the decoder loop because it runs once per window while the loop runs per
token, and because an assistant with its own encoder needs only this half of a model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch.nn import functional as F

from streamcap.core.constants import SAMPLE_RATE

__all__ = ["WhisperFrontEnd"]

#: Log-mel frames per encoder position (the encoder's second convolution has stride 2).
MEL_FRAMES_PER_POSITION = 2
#: Zeros kept past the audio of a shortened context, so the STFT's reflected edge sees zeros.
_EDGE_SAMPLES = SAMPLE_RATE // 4


class WhisperFrontEnd:
    """Features and encoder output of one model on one device (``model``: transformers').

    ``dtype`` is the decoder's: the encoder output comes out in it. ``encoder_dtype`` (default:
    the same) is the encoder's, and that of the features (a bf16 encoder with an fp32 decoder
    on CPUs with native bf16, see `streamcap.models.loader.choose_placement`).
    """

    def __init__(
        self,
        model: Any,
        processor: Any,
        device: str,
        dtype: torch.dtype,
        encoder_dtype: torch.dtype | None = None,
    ) -> None:
        self.feature_extractor: Any = processor.feature_extractor
        self.encoder: Any = model.model.encoder
        self.device = torch.device(device)
        self.dtype = dtype
        self.encoder_dtype = encoder_dtype or dtype

    @property
    def positions(self) -> int:
        """Encoder positions of a full window (1500 for Whisper's 30 s)."""
        return int(self.encoder.embed_positions.weight.shape[0])

    def features(self, audio: npt.NDArray[np.float32], frames: int | None = None) -> torch.Tensor:
        """Log-mel features of audio padded to 30 s, exactly as the processor makes them.

        ``frames`` asks for only the first frames (a shortened audio context). They are the
        same numbers: the padding is zeros either way, its log-mel floor never sets the
        clamping maximum, and we keep a quarter second of zeros past the audio so the STFT's
        reflected edge sees zeros as it would in the full input.
        """
        fe = self.feature_extractor
        kwargs: dict[str, Any] = {}
        if frames is not None:
            hop = int(fe.hop_length)
            step = MEL_FRAMES_PER_POSITION * hop
            samples = max(frames * hop, len(audio) + _EDGE_SAMPLES)
            samples = -(-samples // step) * step  # whole encoder positions
            if samples < int(fe.n_samples):
                kwargs["max_length"] = samples
        out = fe(audio, sampling_rate=SAMPLE_RATE, return_tensors="pt", **kwargs)
        feats: torch.Tensor = out.input_features
        if frames is not None:
            feats = feats[..., :frames]
        return feats.to(self.device, self.encoder_dtype)

    @torch.inference_mode()
    def encode(self, features: torch.Tensor, positions: int | None = None) -> torch.Tensor:
        """Encoder output; ``positions`` below a full window encodes only the first
        ``positions / ENCODER_POSITIONS_PER_S`` seconds.

        transformers' ``WhisperEncoder`` insists on 3000 mel frames, so the shortened path runs
        the same modules by hand on the sliced features and positional embeddings.
        The output is in the decoder's dtype (cast from the encoder's where they differ).
        """
        enc = self.encoder
        features = features.to(self.encoder_dtype)
        if positions is None or positions >= self.positions:
            full: torch.Tensor = enc(features).last_hidden_state
            return full.to(self.dtype)
        x = features[..., : MEL_FRAMES_PER_POSITION * positions]
        x = F.gelu(enc.conv1(x))
        x = F.gelu(enc.conv2(x))
        x = x.permute(0, 2, 1) + enc.embed_positions.weight[:positions]
        for layer in enc.layers:
            out = layer(x, None)
            x = out[0] if isinstance(out, tuple) else out
        normed: torch.Tensor = enc.layer_norm(x)
        return normed.to(self.dtype)
