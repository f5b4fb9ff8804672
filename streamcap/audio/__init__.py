"""Audio I/O at the pipeline's edge: files, microphone, raw PCM, resampling.

Everything returned here is mono float32 in [-1, 1] at 16 kHz unless a rate is asked for.
"""

from __future__ import annotations

from .errors import AudioError, DeviceNotFoundError, NoMicrophoneError
from .file import audio_duration, iter_audio_chunks, load_audio
from .mic import NO_MIC_MESSAGE, InputDevice, MicSource, find_input_device, list_input_devices
from .pcm import SAMPLE_BYTES, PcmFormat, float_to_pcm, pcm_to_float
from .resample import TARGET_RATE, StreamResampler, resample, to_mono_float32

__all__ = [
    "NO_MIC_MESSAGE",
    "SAMPLE_BYTES",
    "TARGET_RATE",
    "AudioError",
    "DeviceNotFoundError",
    "InputDevice",
    "MicSource",
    "NoMicrophoneError",
    "PcmFormat",
    "StreamResampler",
    "audio_duration",
    "find_input_device",
    "float_to_pcm",
    "iter_audio_chunks",
    "list_input_devices",
    "load_audio",
    "pcm_to_float",
    "resample",
    "to_mono_float32",
]
