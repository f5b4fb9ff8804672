"""Audio I/O at the pipeline's edge: files, microphone, raw PCM, resampling, the voice
detectors' registry (`vad`); and a publisher's sources (`capture`): standard input and URLs
(`stream_input`), what the computer plays (`monitor`).

Everything returned here is mono float32 in [-1, 1] at 16 kHz unless a rate is asked for.

The names below are imported from their modules on first use (`streamcap._face`), so importing
the package loads neither PyAV, soundfile, soxr nor sounddevice. ``resample`` (the function) is
not among them: its module has the same name, which a package attribute cannot be twice; import
it from `streamcap.audio.resample`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcap._face import lazy_face

if TYPE_CHECKING:  # what the names are, for type checkers; imported on first use at run time
    from streamcap.audio.capture import CaptureBuffer as CaptureBuffer
    from streamcap.audio.capture import Source as Source
    from streamcap.audio.capture import capture_into as capture_into
    from streamcap.audio.capture import open_file as open_file
    from streamcap.audio.capture import open_mic as open_mic
    from streamcap.audio.capture import open_monitor as open_monitor
    from streamcap.audio.capture import open_stdin as open_stdin
    from streamcap.audio.capture import open_url as open_url
    from streamcap.audio.errors import AudioError as AudioError
    from streamcap.audio.errors import DeviceNotFoundError as DeviceNotFoundError
    from streamcap.audio.errors import NoMicrophoneError as NoMicrophoneError
    from streamcap.audio.file import audio_duration as audio_duration
    from streamcap.audio.file import iter_audio_chunks as iter_audio_chunks
    from streamcap.audio.file import load_audio as load_audio
    from streamcap.audio.mic import NO_MIC_MESSAGE as NO_MIC_MESSAGE
    from streamcap.audio.mic import InputDevice as InputDevice
    from streamcap.audio.mic import MicSource as MicSource
    from streamcap.audio.mic import find_input_device as find_input_device
    from streamcap.audio.mic import list_input_devices as list_input_devices
    from streamcap.audio.monitor import DEFAULT_MONITOR as DEFAULT_MONITOR
    from streamcap.audio.monitor import MonitorSource as MonitorSource
    from streamcap.audio.monitor import list_monitors as list_monitors
    from streamcap.audio.monitor import monitor_name as monitor_name
    from streamcap.audio.pcm import SAMPLE_BYTES as SAMPLE_BYTES
    from streamcap.audio.pcm import PcmFormat as PcmFormat
    from streamcap.audio.pcm import float_to_pcm as float_to_pcm
    from streamcap.audio.pcm import pcm_to_float as pcm_to_float
    from streamcap.audio.resample import TARGET_RATE as TARGET_RATE
    from streamcap.audio.resample import StreamResampler as StreamResampler
    from streamcap.audio.resample import to_mono_float32 as to_mono_float32
    from streamcap.audio.stream_input import LIVE_SCHEMES as LIVE_SCHEMES
    from streamcap.audio.stream_input import RawPcm as RawPcm
    from streamcap.audio.stream_input import av_chunks as av_chunks
    from streamcap.audio.stream_input import ffmpeg_chunks as ffmpeg_chunks
    from streamcap.audio.stream_input import is_live as is_live
    from streamcap.audio.stream_input import is_url as is_url
    from streamcap.audio.stream_input import open_container as open_container
    from streamcap.audio.stream_input import raw_chunks as raw_chunks
    from streamcap.audio.stream_input import spool_stdin as spool_stdin
    from streamcap.audio.stream_input import url_for_messages as url_for_messages
    from streamcap.audio.vad import UnknownVad as UnknownVad
    from streamcap.audio.vad import VadFactory as VadFactory
    from streamcap.audio.vad import VadUnavailable as VadUnavailable
    from streamcap.audio.vad import check_vad as check_vad
    from streamcap.audio.vad import describe_vad as describe_vad
    from streamcap.audio.vad import make_vad as make_vad
    from streamcap.audio.vad import register_vad as register_vad
    from streamcap.audio.vad import vad_names as vad_names

#: public name -> the module of this package that defines it
_EXPORTS = {
    "CaptureBuffer": "capture",
    "Source": "capture",
    "capture_into": "capture",
    "open_file": "capture",
    "open_mic": "capture",
    "open_monitor": "capture",
    "open_stdin": "capture",
    "open_url": "capture",
    "AudioError": "errors",
    "DeviceNotFoundError": "errors",
    "NoMicrophoneError": "errors",
    "audio_duration": "file",
    "iter_audio_chunks": "file",
    "load_audio": "file",
    "InputDevice": "mic",
    "MicSource": "mic",
    "NO_MIC_MESSAGE": "mic",
    "find_input_device": "mic",
    "list_input_devices": "mic",
    "DEFAULT_MONITOR": "monitor",
    "MonitorSource": "monitor",
    "list_monitors": "monitor",
    "monitor_name": "monitor",
    "PcmFormat": "pcm",
    "SAMPLE_BYTES": "pcm",
    "float_to_pcm": "pcm",
    "pcm_to_float": "pcm",
    "StreamResampler": "resample",
    "TARGET_RATE": "resample",
    "to_mono_float32": "resample",
    "LIVE_SCHEMES": "stream_input",
    "RawPcm": "stream_input",
    "av_chunks": "stream_input",
    "ffmpeg_chunks": "stream_input",
    "is_live": "stream_input",
    "is_url": "stream_input",
    "open_container": "stream_input",
    "raw_chunks": "stream_input",
    "spool_stdin": "stream_input",
    "url_for_messages": "stream_input",
    "UnknownVad": "vad",
    "VadFactory": "vad",
    "VadUnavailable": "vad",
    "check_vad": "vad",
    "describe_vad": "vad",
    "make_vad": "vad",
    "register_vad": "vad",
    "vad_names": "vad",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
