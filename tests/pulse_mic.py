"""A real virtual microphone for tests: PulseAudio with a null sink fed by a looped WAV.

No sound card exists on CI machines, but PortAudio (sounddevice) and Chromium record from a
PulseAudio source like from any microphone. ``PulseMic`` starts a private daemon (runtime files in
a short temp dir, anonymous auth so clients with another ``HOME`` connect), a ``module-null-sink``
and a ``module-virtual-source`` on its monitor (made the default source), and plays a WAV into
the sink with ``sox ... repeat - | pacat`` (seamless loop; ``paplay`` in a loop leaves gaps).

Clients need ``PULSE_SERVER`` (``mic.env``). ``sounddevice`` reads its device list at import, so
record in a process started after ``start()`` (or rely on ``list_input_devices``' rescan).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

SINK = "streamcap_sink"
SOURCE = "streamcap_mic"
SINK_RATE = 48000
TOOLS = ("pulseaudio", "pactl", "pacat", "sox")


def missing_reason() -> str | None:
    """Why a PulseAudio microphone cannot be made here, or None when it can."""
    if shutil.which("pulseaudio") is None:
        return "pulseaudio binary not installed (apt-get install pulseaudio pulseaudio-utils sox)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"tools missing for the virtual microphone: {', '.join(missing)}"
    return None


class PulseMic:
    """Private PulseAudio daemon whose default source plays a WAV file in a loop."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="scpulse-"))  # short: socket paths max 107 chars
        self.socket = self.root / "native"
        self.server = f"unix:{self.socket}"
        self.log = self.root / "pulse.log"
        self._daemon: subprocess.Popen[bytes] | None = None
        self._feeder: list[subprocess.Popen[bytes]] = []
        self.playing: Path | None = None

    @property
    def env(self) -> dict[str, str]:
        """Environment for a client process (the current one plus ``PULSE_SERVER``)."""
        return {**os.environ, "PULSE_SERVER": self.server}

    def _daemon_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PULSE_")}
        for name in ("home", "run", "config"):
            (self.root / name).mkdir(exist_ok=True)
        env.update(
            HOME=str(self.root / "home"),
            XDG_RUNTIME_DIR=str(self.root / "run"),
            XDG_CONFIG_HOME=str(self.root / "config"),
        )
        return env

    def pactl(self, *args: str) -> str:
        out = subprocess.run(
            ["pactl", f"--server={self.server}", *args],
            capture_output=True,
            text=True,
            timeout=10,
            env=self._daemon_env(),
        )
        if out.returncode:
            raise RuntimeError(f"pactl {' '.join(args)} failed: {out.stderr.strip()}")
        return out.stdout.strip()

    def start(self, timeout: float = 10.0) -> PulseMic:
        self._daemon = subprocess.Popen(
            [
                "pulseaudio",
                "-n",  # no default.pa: only the modules we load
                "--daemonize=no",
                "--system=no",
                "--exit-idle-time=-1",
                "--use-pid-file=no",
                "--disallow-exit=no",
                f"--log-target=file:{self.log}",
                f"--load=module-native-protocol-unix auth-anonymous=1 socket={self.socket}",
            ],
            env=self._daemon_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self._daemon.poll() is not None:
                self.stop()
                raise RuntimeError(f"pulseaudio exited: {self._log_tail()}")
            if self.socket.exists():
                try:
                    self.pactl("info")
                    break
                except (RuntimeError, subprocess.TimeoutExpired):
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pulseaudio did not come up: {self._log_tail()}")
            time.sleep(0.05)
        self.pactl(
            "load-module",
            "module-null-sink",
            f"sink_name={SINK}",
            f"rate={SINK_RATE}",
            "channels=2",
        )
        self.pactl(
            "load-module",
            "module-virtual-source",
            f"source_name={SOURCE}",
            f"master={SINK}.monitor",
        )
        self.pactl("set-default-sink", SINK)
        self.pactl("set-default-source", SOURCE)
        return self

    def play(self, wav: str | os.PathLike[str]) -> None:
        """Loop ``wav`` (any rate/channels sox reads) into the microphone, replacing what played."""
        self._stop_feeder()
        sox = subprocess.Popen(
            [
                "sox",
                "-q",
                str(wav),
                "-t",
                "raw",
                "-e",
                "signed",
                "-b",
                "16",
                "-c",
                "1",
                "-r",
                str(SINK_RATE),
                "-",
                "repeat",
                "-",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        pacat = subprocess.Popen(
            [
                "pacat",
                f"--server={self.server}",
                "--playback",
                "--raw",
                "--format=s16le",
                f"--rate={SINK_RATE}",
                "--channels=1",
                f"--device={SINK}",
            ],
            stdin=sox.stdout,
            stderr=subprocess.DEVNULL,
            env=self._daemon_env(),
        )
        assert sox.stdout is not None
        sox.stdout.close()  # pacat owns the read end; sox gets SIGPIPE if pacat dies
        self._feeder = [sox, pacat]
        self.playing = Path(wav)

    def _stop_feeder(self) -> None:
        for proc in reversed(self._feeder):  # pacat first: sox then stops on a broken pipe
            _end(proc)
        self._feeder = []
        self.playing = None

    def stop(self) -> None:
        self._stop_feeder()
        if self._daemon is not None:
            _end(self._daemon)
            self._daemon = None
        shutil.rmtree(self.root, ignore_errors=True)

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-5:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> PulseMic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Stop one process we started, by its pid: SIGTERM, then SIGKILL if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def best_alignment(recording: np.ndarray, reference: np.ndarray) -> tuple[float, int]:
    """Highest Pearson correlation of ``recording`` with any window of a looped ``reference``.

    Returns ``(correlation, offset)``, offset in samples modulo the reference length. The
    reference is tiled, so a recording that wraps around the loop point still aligns. The lag is
    found by normalised cross-correlation (FFT and running sums), then refined to a fraction of
    a sample: a recording path's latency is rarely a whole number of 16 kHz samples (e.g. 1/3 of
    one after 48 kHz), and that alone costs ~0.02 of correlation on speech at integer lags.
    """
    rec = np.asarray(recording, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    period, n, margin = ref.size, rec.size, 256
    if n == 0 or period == 0:
        return 0.0, 0
    ref = np.tile(ref, int(np.ceil((n + 2 * margin) / period)) + 2)
    r = rec - rec.mean()
    r_norm = float(np.sqrt(np.sum(r * r)))
    if r_norm == 0:
        return 0.0, 0
    size = 1 << int(np.ceil(np.log2(ref.size + n)))
    num = np.fft.irfft(np.fft.rfft(ref, size) * np.conj(np.fft.rfft(r, size)), size)
    num = num[: ref.size - n + 1]
    c1 = np.concatenate([[0.0], np.cumsum(ref)])
    c2 = np.concatenate([[0.0], np.cumsum(ref * ref)])
    s1 = c1[n:] - c1[:-n]
    s2 = c2[n:] - c2[:-n]
    var = np.maximum(s2 - s1 * s1 / n, 1e-12)
    corr = num / (r_norm * np.sqrt(var))
    # Windows of (near) digital silence give meaningless ratios; ignore them, and the edges
    # (every lag also appears away from them, the reference being tiled).
    corr[var < 1e-6 * n * max(float(np.var(ref)), 1e-12)] = 0.0
    corr[:margin] = 0.0
    corr[-margin:] = 0.0
    k = int(np.argmax(corr))
    best = float(corr[k])
    seg = ref[k - margin : k + n + margin]
    spectrum = np.fft.rfft(seg)
    freqs = np.fft.rfftfreq(seg.size)
    for d in np.linspace(-1.0, 1.0, 41):  # fractional delays by phase shift, 1/20 sample steps
        w = np.fft.irfft(spectrum * np.exp(2j * np.pi * freqs * d), seg.size)[margin : margin + n]
        w = w - w.mean()
        w_norm = float(np.sqrt(np.sum(w * w)))
        if w_norm > 0:
            best = max(best, float(np.dot(r, w)) / (r_norm * w_norm))
    return best, k % period
