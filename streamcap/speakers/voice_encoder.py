"""A speaker's voice as a 256-d unit vector: resemblyzer's pretrained GE2E voice encoder.

The weights ship in the PyPI wheel ``resemblyzer==0.1.4`` (Apache-2.0; ``pretrained.pt``, 17 MB),
installed with ``pip install --no-deps`` (its declared dependencies pull the ``webrtcvad``
sdist, which does not build here, and librosa). The package itself is never imported: the file
is found with `importlib.util.find_spec` (which does not run the package's ``__init__``), its
state dict is loaded into `_Net` below, and the features are computed here in numpy exactly as
resemblyzer computes them with librosa:

- audio: 16 kHz mono float32; the volume raised (never lowered) to -30 dBFS RMS;
- features: a power mel spectrogram, *not* logarithmic: 25 ms Hann window (n_fft 400), 10 ms
  hop, centred frames with reflect padding (librosa's default when the model was trained),
  40 bands on the Slaney mel scale with Slaney area normalisation, 0-8000 Hz;
- network: a 3-layer LSTM (hidden 256) over 160-frame (1.6 s) partial windows; the last layer's
  final hidden state -> Linear 256->256 -> ReLU -> L2 norm;
- an utterance: the partial windows at 1.3 per second (the last one zero-padded if it has at
  least 75 % of its frames), their embeddings averaged and L2-normalised.

Nothing is downloaded at run time. `VoiceEncoder.embed` is one utterance,
`VoiceEncoder.embed_many` several in one batch, `VoiceEncoder.embed_partials` the windows
along a clip (for change points inside it).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from streamcap.core.constants import SAMPLE_RATE
from streamcap.errors import UserError
from streamcap.speakers.wheel_files import wheel_file

__all__ = ["VoiceEncoder", "shared_encoder", "weights_path"]

#: FFT size and window: 25 ms at 16 kHz.
N_FFT = 400
#: Frame hop: 10 ms.
HOP = 160
#: Mel bands.
N_MELS = 40
#: Frames in one partial window (1.6 s).
PARTIAL_FRAMES = 160
#: Seconds in one partial window.
PARTIAL_S = PARTIAL_FRAMES * HOP / SAMPLE_RATE
#: Embedding size.
EMBEDDING_SIZE = 256
#: resemblyzer's volume target (dBFS RMS); quieter audio is raised to it, louder left alone.
TARGET_DBFS = -30.0
_INT16_MAX = 2**15 - 1

WEIGHTS_PACKAGE = "resemblyzer"
WEIGHTS_FILE = "pretrained.pt"
INSTALL_HINT = "pip install --no-deps resemblyzer==0.1.4"


class VoiceEncoderMissing(UserError):
    """The voice encoder's weights are not installed (one line for the user to act on)."""


def weights_path() -> Path:
    """``pretrained.pt`` of the installed resemblyzer wheel, found without importing it."""
    path = wheel_file(WEIGHTS_PACKAGE, WEIGHTS_FILE)
    if path is not None:
        return path
    raise VoiceEncoderMissing(
        f"speaker labels need the voice encoder's weights: {INSTALL_HINT} "
        "(the wheel is only read for its pretrained.pt; nothing is downloaded at run time)"
    )


# --------------------------------------------------------------------------- features


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale (librosa ``htk=False``): linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    f_sp = 200.0 / 3
    mels = f / f_sp
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    log_part = f >= min_log_hz
    mels = np.where(
        log_part, min_log_mel + np.log(np.maximum(f, min_log_hz) / min_log_hz) / logstep, mels
    )
    return mels


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    f_sp = 200.0 / 3
    freqs = f_sp * m
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), freqs)


@functools.lru_cache(maxsize=4)
def mel_filterbank(
    sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS
) -> np.ndarray:
    """(n_mels, 1 + n_fft // 2) triangular filters, Slaney scale and area norm, 0 Hz to
    Nyquist: ``librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels)``."""
    fft_freqs = np.linspace(0.0, sample_rate / 2, 1 + n_fft // 2)
    mel_pts = np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(sample_rate / 2.0)),
                          n_mels + 2)  # fmt: skip
    mel_f = _mel_to_hz(mel_pts)
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:] - mel_f[:-2]))[:, None]  # Slaney: equal area per filter
    out = weights.astype(np.float32)
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=1)
def _hann() -> np.ndarray:
    """Periodic Hann window of N_FFT samples (``scipy.signal.get_window('hann', N_FFT)``)."""
    n = np.arange(N_FFT)
    return (0.5 - 0.5 * np.cos(2.0 * np.pi * n / N_FFT)).astype(np.float32)


def mel_spectrogram(audio: np.ndarray) -> np.ndarray:
    """(frames, N_MELS) float32 power mel spectrogram of 16 kHz audio, as
    ``librosa.feature.melspectrogram(y, sr=16000, n_fft=400, hop_length=160, n_mels=40,
    pad_mode="reflect").T``: frame ``i`` is centred on sample ``i * HOP``."""
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    pad = N_FFT // 2
    if x.size <= pad:  # reflect padding needs more samples than it pads
        x = np.pad(x, (0, pad + 1 - x.size))
    x = np.pad(x, (pad, pad), mode="reflect")
    n_frames = 1 + (x.size - N_FFT) // HOP
    frames = np.lib.stride_tricks.as_strided(
        x, shape=(n_frames, N_FFT), strides=(x.strides[0] * HOP, x.strides[0]), writeable=False
    )
    spec = np.fft.rfft(frames * _hann(), axis=1)
    power = (spec.real**2 + spec.imag**2).astype(np.float32)
    return np.asarray(power @ mel_filterbank().T, dtype=np.float32)


def normalize_volume(audio: np.ndarray, target_dbfs: float = TARGET_DBFS) -> np.ndarray:
    """Raise the RMS level to ``target_dbfs`` (never lower it; silence stays silence), as
    resemblyzer's ``normalize_volume(wav, -30, increase_only=True)``."""
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    rms = float(np.sqrt(np.mean((x.astype(np.float64) * _INT16_MAX) ** 2))) if x.size else 0.0
    if rms <= 0.0:
        return x
    change = target_dbfs - 20.0 * np.log10(rms / _INT16_MAX)
    if change <= 0:
        return x
    return (x * np.float32(10 ** (change / 20.0))).astype(np.float32)


def partial_slices(
    n_samples: int, rate: float = 1.3, min_coverage: float = 0.75
) -> list[tuple[int, int]]:
    """Frame ranges ``(start, stop)`` of the partial windows of an utterance of ``n_samples``:
    ``rate`` windows per second, the last one kept if it has ``min_coverage`` of its frames
    (always at least one). resemblyzer's ``VoiceEncoder.compute_partial_slices``."""
    if not 0 < min_coverage <= 1:
        raise ValueError("min_coverage must be in (0, 1]")
    n_frames = int(np.ceil((n_samples + 1) / HOP))
    step = int(np.round((SAMPLE_RATE / rate) / HOP))
    if not 0 < step <= PARTIAL_FRAMES:
        raise ValueError(f"rate {rate} gives a window step of {step} frames")
    steps = max(1, n_frames - PARTIAL_FRAMES + step + 1)
    out = [(i, i + PARTIAL_FRAMES) for i in range(0, steps, step)]
    coverage = (n_samples - out[-1][0] * HOP) / (PARTIAL_FRAMES * HOP)
    if coverage < min_coverage and len(out) > 1:
        out.pop()
    return out


# --------------------------------------------------------------------------- network

_shared_lock = threading.Lock()
_shared: VoiceEncoder | None = None


def shared_encoder() -> VoiceEncoder:
    """The process's one CPU `VoiceEncoder` (loaded on first use; it is thread-safe, so every
    stream's labeller can use it)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = VoiceEncoder()
        return _shared


class _Net(nn.Module):
    """resemblyzer's ``VoiceEncoder`` network (its parameter names, so its state dict loads)."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(N_MELS, 256, 3, batch_first=True)
        self.linear = nn.Linear(256, EMBEDDING_SIZE)
        self.relu = nn.ReLU()

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        _, (hidden, _) = self.lstm(mels)
        raw = self.relu(self.linear(hidden[-1]))
        return raw / torch.norm(raw, dim=1, keepdim=True).clamp_min(1e-12)


class VoiceEncoder:
    """The pretrained voice encoder on the CPU (or ``device``); thread-safe (one lock).

    ``threads``: torch threads for its forward pass (the caller's setting is restored after).
    One by default: the LSTM's small matrix products gain little from a second thread, and on
    a 2-core machine shared with a decoder two threads made a 5 s clip take 0.3-7.7 s (threads
    waiting for a core) against a steady 0.14-0.17 s on one.

    - ``embed(audio)``: one utterance's embedding (256-d, unit norm).
    - ``embed_many(clips)``: several utterances, all their windows in one batch.
    - ``embed_partials(audio, hop_s)``: the 1.6 s windows along a clip every ``hop_s`` seconds
      and their start times (seconds from the clip's first sample).
    """

    name = "ge2e"
    window_s = PARTIAL_S

    def __init__(
        self,
        weights: str | Path | None = None,
        device: str = "cpu",
        batch: int = 64,
        threads: int | None = 1,
    ) -> None:
        self.path = Path(weights) if weights is not None else weights_path()
        self.device = torch.device(device)
        self.batch = batch
        self.threads = threads
        checkpoint: dict[str, Any] = torch.load(self.path, map_location="cpu", weights_only=True)
        # the GE2E loss's similarity scale and bias are training-only parameters
        state = {
            k: v for k, v in checkpoint["model_state"].items() if not k.startswith("similarity_")
        }
        self._net = _Net()
        self._net.load_state_dict(state, strict=True)
        self._net.eval().to(self.device)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ windows

    def embed_mels(self, windows: np.ndarray) -> np.ndarray:
        """(n, frames, N_MELS) mel windows -> (n, 256) unit embeddings (batches of ``batch``)."""
        if len(windows) == 0:
            return np.zeros((0, EMBEDDING_SIZE), np.float32)
        out = []
        with self._lock, torch.inference_mode():
            before = torch.get_num_threads()
            if self.threads and self.device.type == "cpu":
                torch.set_num_threads(self.threads)
            try:
                for i in range(0, len(windows), self.batch):
                    x = torch.from_numpy(np.ascontiguousarray(windows[i : i + self.batch]))
                    out.append(self._net(x.to(self.device)).cpu().numpy())
            finally:
                if torch.get_num_threads() != before:
                    torch.set_num_threads(before)
        return np.concatenate(out).astype(np.float32)

    @staticmethod
    def _windows(audio: np.ndarray, slices: Sequence[tuple[int, int]]) -> np.ndarray:
        need = slices[-1][1] * HOP
        x = np.asarray(audio, dtype=np.float32).reshape(-1)
        if need >= x.size:
            x = np.pad(x, (0, need - x.size))
        mel = mel_spectrogram(x)
        return np.stack([mel[a:b] for a, b in slices])

    # ------------------------------------------------------------------ utterances

    def embed(self, audio: np.ndarray, rate: float = 1.3, min_coverage: float = 0.75) -> np.ndarray:
        """One utterance (16 kHz mono): the mean of its partial windows' embeddings, unit norm."""
        return self.embed_many([audio], rate, min_coverage)[0]

    def embed_many(
        self, clips: Sequence[np.ndarray], rate: float = 1.3, min_coverage: float = 0.75
    ) -> np.ndarray:
        """(len(clips), 256): each clip as `embed`, every window in one batched pass."""
        windows: list[np.ndarray] = []
        owner: list[int] = []
        for k, clip in enumerate(clips):
            x = normalize_volume(clip)
            slices = partial_slices(x.size, rate, min_coverage)
            windows.append(self._windows(x, slices))
            owner += [k] * len(slices)
        if not windows:
            return np.zeros((0, EMBEDDING_SIZE), np.float32)
        parts = self.embed_mels(np.concatenate(windows))
        owners = np.asarray(owner)
        out = np.zeros((len(clips), EMBEDDING_SIZE), np.float32)
        for k in range(len(clips)):
            mean = parts[owners == k].mean(axis=0)
            out[k] = mean / max(float(np.linalg.norm(mean)), 1e-12)
        return out

    def embed_partials(
        self, audio: np.ndarray, hop_s: float = 0.4, min_coverage: float = 0.75
    ) -> tuple[np.ndarray, np.ndarray]:
        """The 1.6 s windows along ``audio`` every ``hop_s`` (the volume raised once for the
        whole clip): (start seconds of each window, (n, 256) unit embeddings). A clip shorter
        than a window gives one zero-padded window."""
        x = normalize_volume(audio)
        slices = partial_slices(x.size, 1.0 / hop_s, min_coverage)
        emb = self.embed_mels(self._windows(x, slices))
        starts = np.array([a * HOP / SAMPLE_RATE for a, _ in slices], dtype=np.float64)
        return starts, emb
