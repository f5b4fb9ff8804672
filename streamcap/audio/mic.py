"""Microphone capture with PortAudio (``sounddevice``), delivered as 16 kHz mono float32 chunks.

``sounddevice`` is imported lazily: it loads libportaudio and reads the device list at import
time, so importing it at module level would (a) crash ``import streamcap`` on machines without
libportaudio and (b) freeze an empty device list if PulseAudio starts later.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from .errors import AudioError, DeviceNotFoundError, NoMicrophoneError
from .resample import TARGET_RATE, StreamResampler

__all__ = ["NO_MIC_MESSAGE", "InputDevice", "MicSource", "find_input_device", "list_input_devices"]

NO_MIC_MESSAGE = "no microphone found (no audio input devices); use --mic or check your sound card"


@dataclass(frozen=True)
class InputDevice:
    """One capture device as PortAudio reports it."""

    index: int
    name: str
    hostapi: str
    max_input_channels: int
    default_samplerate: float

    def __str__(self) -> str:
        return (
            f"{self.index}: {self.name} ({self.hostapi}, {self.max_input_channels} ch, "
            f"{self.default_samplerate:g} Hz)"
        )


def _sounddevice() -> ModuleType:
    try:
        import sounddevice as sd
    except OSError as e:  # raised at import when libportaudio is not installed
        raise NoMicrophoneError(
            "cannot use the microphone: the PortAudio library is missing (install libportaudio2)"
        ) from e
    return sd


def _query_inputs(sd: ModuleType) -> list[InputDevice]:
    try:
        devices = sd.query_devices()
        hostapis = sd.query_hostapis()
    except sd.PortAudioError:
        return []
    return [
        InputDevice(
            index=i,
            name=str(d["name"]),
            hostapi=str(hostapis[d["hostapi"]]["name"]),
            max_input_channels=int(d["max_input_channels"]),
            default_samplerate=float(d["default_samplerate"]),
        )
        for i, d in enumerate(devices)
        if d["max_input_channels"] > 0
    ]


def list_input_devices(rescan: bool = True) -> list[InputDevice]:
    """Audio input devices, possibly empty.

    PortAudio's device list is fixed when it initialises; with ``rescan`` an empty list triggers
    one re-initialisation, so a sound server started after import (PulseAudio) is still found.
    """
    sd = _sounddevice()
    found = _query_inputs(sd)
    terminate = getattr(sd, "_terminate", None)
    initialize = getattr(sd, "_initialize", None)
    if not found and rescan and terminate is not None and initialize is not None:
        try:
            terminate()
            initialize()
        except Exception:  # best effort: the empty list stands
            return []
        found = _query_inputs(sd)
    return found


def _available(devices: list[InputDevice]) -> str:
    return ", ".join(f"{d.index} {d.name!r}" for d in devices)


def find_input_device(device: int | str | None = None) -> InputDevice:
    """Resolve ``--device``: None = system default, an index, or a case-insensitive name part.

    Raises ``NoMicrophoneError`` when there is no input device at all and
    ``DeviceNotFoundError`` when nothing matches.
    """
    devices = list_input_devices()
    if not devices:
        raise NoMicrophoneError(NO_MIC_MESSAGE)
    if isinstance(device, str) and device.strip().lstrip("-").isdigit():
        device = int(device.strip())
    if device is None:
        sd = _sounddevice()
        try:
            default = int(sd.default.device[0])
        except (TypeError, IndexError, ValueError):
            default = -1
        by_index = {d.index: d for d in devices}
        return by_index.get(default, devices[0])
    if isinstance(device, int):
        for d in devices:
            if d.index == device:
                return d
        raise DeviceNotFoundError(
            f"audio device {device} is not an input device; available: {_available(devices)}"
        )
    wanted = device.strip().lower()
    exact = [d for d in devices if d.name.lower() == wanted]
    partial = [d for d in devices if wanted in d.name.lower()]
    if exact or partial:
        return (exact or partial)[0]
    raise DeviceNotFoundError(
        f"no input device matches {device!r}; available: {_available(devices)}"
    )


class MicSource:
    """Live microphone audio as consecutive mono float32 chunks at ``sample_rate`` (16 kHz).

    Captures at the device's native rate (or ``capture_rate``) and resamples with soxr in the
    PortAudio callback (microseconds per block), so the device never has to support 16 kHz.
    Chunks go either to ``callback(chunk)``, called on the audio thread (keep it fast, e.g. put
    into your own queue), or to an internal bounded queue read with ``read()`` / iteration; when
    the reader falls behind by ``max_queue_s``, the oldest audio is dropped and counted in
    ``dropped`` rather than growing memory without bound. Use as a context manager.
    """

    def __init__(
        self,
        device: int | str | None = None,
        *,
        capture_rate: float | None = None,
        sample_rate: int = TARGET_RATE,
        chunk_s: float = 0.1,
        callback: Callable[[np.ndarray], None] | None = None,
        max_queue_s: float = 60.0,
    ) -> None:
        if chunk_s <= 0:
            raise ValueError(f"chunk_s must be positive, got {chunk_s}")
        self._device_arg = device
        self._capture_rate_arg = capture_rate
        self.sample_rate = sample_rate
        self.chunk_size = max(1, round(chunk_s * sample_rate))
        self._callback = callback
        self._max_chunks = max(1, round(max_queue_s / chunk_s))
        self._queue: queue.Queue[np.ndarray | None] = queue.Queue()
        self._pending = np.zeros(0, dtype=np.float32)
        self._lock = threading.Lock()  # guards resampler/pending between callback and stop()
        self._stream: Any = None
        self._resampler: StreamResampler | None = None
        self._error: BaseException | None = None
        self._ended = False
        self.device: InputDevice | None = None
        self.capture_rate: float = 0.0
        self.channels = 0
        self.overflows = 0  # PortAudio reported lost input (the machine was too slow)
        self.dropped = 0  # chunks discarded because nobody read them

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> MicSource:
        """Open and start the input stream; raises ``NoMicrophoneError`` / ``AudioError``."""
        if self._stream is not None:
            return self
        sd = _sounddevice()
        dev = find_input_device(self._device_arg)
        rate = float(self._capture_rate_arg or dev.default_samplerate)
        channels = self._pick_channels(sd, dev, rate)
        self.device, self.capture_rate, self.channels = dev, rate, channels
        self._resampler = StreamResampler(rate, self.sample_rate)
        self._pending = np.zeros(0, dtype=np.float32)
        self._queue = queue.Queue()
        self._error = None
        self._ended = False
        try:
            stream = sd.InputStream(
                device=dev.index,
                samplerate=rate,
                channels=channels,
                dtype="float32",
                blocksize=max(1, round(rate * self.chunk_size / self.sample_rate)),
                callback=self._on_audio,
            )
            stream.start()
        except (sd.PortAudioError, ValueError) as e:
            raise AudioError(
                f"cannot open microphone {dev.name!r} at {rate:g} Hz: {' '.join(str(e).split())}"
            ) from e
        self._stream = stream
        return self

    @staticmethod
    def _pick_channels(sd: ModuleType, dev: InputDevice, rate: float) -> int:
        # Mono if the device offers it (the server then downmixes); some hardware only opens
        # in stereo. A rate the device refuses is reported by the caller's open attempt.
        for ch in dict.fromkeys((1, min(2, dev.max_input_channels))):
            try:
                sd.check_input_settings(
                    device=dev.index, channels=ch, samplerate=rate, dtype="float32"
                )
                return ch
            except (sd.PortAudioError, ValueError):
                continue
        return 1

    def stop(self) -> None:
        """Stop capture, deliver the audio still in the resampler, then end the chunk stream."""
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.stop()
            finally:
                stream.close()
        with self._lock:
            if self._ended:
                return
            self._ended = True
            if self._resampler is not None:
                self._emit(self._resampler.flush())
            if self._pending.size:
                self._deliver(self._pending)
                self._pending = np.zeros(0, dtype=np.float32)
        if self._callback is None:
            self._put(None)

    def __enter__(self) -> MicSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def error(self) -> BaseException | None:
        """The exception that ended capture inside the audio thread (e.g. from ``callback``)."""
        return self._error

    @property
    def running(self) -> bool:
        return self._stream is not None and bool(self._stream.active)

    # -- audio thread ----------------------------------------------------------------------
    def _on_audio(self, indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        if status and getattr(status, "input_overflow", False):
            self.overflows += 1
        with self._lock:
            if self._ended or self._resampler is None:
                return
            try:
                self._emit(self._resampler.process(indata))
            except Exception as e:  # must not escape into PortAudio
                self._error = e
                self._ended = True
                if self._callback is None:
                    self._put(None)

    def _emit(self, samples: np.ndarray) -> None:
        buf = np.concatenate([self._pending, samples]) if self._pending.size else samples
        n = self.chunk_size
        start = 0
        while buf.size - start >= n:
            self._deliver(buf[start : start + n].copy())
            start += n
        self._pending = buf[start:].copy()

    def _deliver(self, chunk: np.ndarray) -> None:
        if self._callback is not None:
            self._callback(chunk)
        else:
            self._put(chunk)

    def _put(self, item: np.ndarray | None) -> None:
        # Bounded by hand so the end marker (None) never displaces audio.
        if item is not None:
            while self._queue.qsize() >= self._max_chunks:
                try:
                    self._queue.get_nowait()
                    self.dropped += 1
                except queue.Empty:
                    break
        self._queue.put_nowait(item)

    # -- consumer side ---------------------------------------------------------------------
    def read(self, timeout: float | None = None) -> np.ndarray | None:
        """Next chunk; None once stopped and drained. Raises ``TimeoutError`` after ``timeout``."""
        if self._callback is not None:
            raise RuntimeError("this MicSource delivers chunks to its callback; read() is unused")
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no microphone audio for {timeout} s") from None
        if item is None:
            self._queue.put_nowait(None)  # keep the end marker for other readers
            if self._error is not None:
                raise AudioError(f"microphone capture failed: {self._error}") from self._error
        return item

    def __iter__(self) -> Iterator[np.ndarray]:
        while (chunk := self.read()) is not None:
            yield chunk

    def record(self, seconds: float, timeout: float | None = None) -> np.ndarray:
        """Capture ``seconds`` of audio (starting and stopping the stream if needed)."""
        if self._callback is not None:
            raise RuntimeError("record() reads the internal queue; this MicSource has a callback")
        want = round(seconds * self.sample_rate)
        got: list[np.ndarray] = []
        n = 0
        owner = self._stream is None
        if owner:
            self.start()
        wait = timeout if timeout is not None else seconds + 10.0
        try:
            while n < want:
                chunk = self.read(timeout=wait)
                if chunk is None:
                    break
                got.append(chunk)
                n += chunk.size
        finally:
            if owner:
                self.stop()
        audio = np.concatenate(got) if got else np.zeros(0, dtype=np.float32)
        return audio[:want]
