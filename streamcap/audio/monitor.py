"""What the computer plays, captured: a PulseAudio monitor source (PipeWire's too, through its
PulseAudio server, ``pipewire-pulse``).

Every PulseAudio sink (a sound card's output, OBS's monitoring device, a null sink a call app
plays into) has a monitor source that records what is played into it. PortAudio's ALSA path
reaches only the default source, and PyAV's FFmpeg has no PulseAudio input, so the monitor is
recorded by ``parec`` (pulseaudio-utils) as raw 16 kHz mono PCM on a pipe: PulseAudio resamples
and downmixes, and `stream_input.raw_chunks` reads it as it comes. ``pactl`` lists the
monitors. Clients reach the daemon the usual way (``PULSE_SERVER``, the user's session).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator

import numpy as np

from .errors import AudioError, DeviceNotFoundError
from .resample import TARGET_RATE
from .stream_input import RawPcm, raw_chunks

__all__ = ["DEFAULT_MONITOR", "MonitorSource", "list_monitors", "monitor_name"]

#: PulseAudio's name for the monitor of the default sink: what the computer plays.
DEFAULT_MONITOR = "@DEFAULT_MONITOR@"
_NO_PAREC = (
    "--monitor needs parec and pactl (Debian: apt-get install pulseaudio-utils; they talk to "
    "PipeWire too, through pipewire-pulse)"
)


def monitor_name(sink: str | None) -> str:
    """The monitor source of `sink` (a sink's name, or a source's name as pactl lists it);
    None or "": the default sink's."""
    if not sink:
        return DEFAULT_MONITOR
    if sink.startswith("@") or sink.endswith(".monitor"):
        return sink
    return f"{sink}.monitor"


def list_monitors() -> list[str]:
    """The monitor sources PulseAudio has (empty when it or pactl is not there)."""
    if shutil.which("pactl") is None:
        return []
    try:
        out = subprocess.run(
            ["pactl", "list", "short", "sources"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = [line.split("\t")[1] for line in out.stdout.splitlines() if line.count("\t") >= 2]
    return [n for n in names if n.endswith(".monitor")]


class MonitorSource:
    """A monitor source as 16 kHz mono float32 chunks of `chunk_s`, from a ``parec`` process
    started by `start` and ended by `stop` (by its own pid). Iterate for the chunks; the
    iteration ends when parec does (the sound server went away)."""

    def __init__(self, sink: str | None = None, chunk_s: float = 0.1) -> None:
        self.device = monitor_name(sink)
        self.chunk_s = chunk_s
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, settle_s: float = 0.5) -> MonitorSource:
        """Start recording; AudioError (one line) when parec is missing or cannot record the
        monitor (no such sink, no sound server): it says so within `settle_s`."""
        if shutil.which("parec") is None:
            raise AudioError(_NO_PAREC)
        cmd = [
            "parec", f"--device={self.device}", "--raw", "--format=s16le",
            f"--rate={TARGET_RATE}", "--channels=1", f"--latency-msec={round(self.chunk_s * 1000)}",
            "--client-name=streamcap publish",
        ]  # fmt: skip
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._stderr()
                self._proc = None
                if "No such entity" in err or "no such" in err.lower():
                    known = ", ".join(list_monitors()) or "none found"
                    raise DeviceNotFoundError(
                        f"no monitor source {self.device!r} (monitors: {known})"
                    )
                raise AudioError(f"cannot record {self.device}: {err or 'parec exited'}")
            time.sleep(0.05)
        return self

    def _stderr(self) -> str:
        proc = self._proc
        if proc is None or proc.stderr is None:
            return ""
        try:
            text = proc.stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        return " ".join(text.split())[-300:]

    def __iter__(self) -> Iterator[np.ndarray]:
        proc = self._proc
        if proc is None or proc.stdout is None:
            raise RuntimeError("MonitorSource.start() first")
        yield from raw_chunks(proc.stdout, RawPcm("s16le", TARGET_RATE, 1), self.chunk_s)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def __enter__(self) -> MonitorSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
