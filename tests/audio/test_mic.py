"""MicSource against a real PulseAudio virtual microphone, and against no sound card at all.

Recording happens in a fresh subprocess: ``sounddevice`` reads the device list when it is
imported, so a process that imported it before PulseAudio started would see no devices.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pulse_mic import PulseMic, best_alignment, missing_reason

from streamcap.audio import NO_MIC_MESSAGE, MicSource, load_audio

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
JFK = DATA / "en_real_jfk.wav"
OTHER = DATA / "en_real_librivox_0870.wav"

RECORD = """
import json, sys
import numpy as np
from streamcap.audio import MicSource, list_input_devices
args = json.loads(sys.argv[1])
devices = [d.name for d in list_input_devices()]
with MicSource(args["device"], capture_rate=args["rate"], chunk_s=0.1) as mic:
    audio = mic.record(args["seconds"])
    info = {"device": mic.device.name, "capture_rate": mic.capture_rate,
            "channels": mic.channels, "overflows": mic.overflows, "dropped": mic.dropped}
np.save(args["out"], audio)
print(json.dumps({"devices": devices, **info}))
"""


def record(
    env: dict[str, str],
    out: Path,
    device: str | int | None = None,
    rate: float | None = None,
    seconds: float = 3.5,
) -> tuple[np.ndarray, dict[str, object]]:
    args = {"device": device, "rate": rate, "seconds": seconds, "out": str(out)}
    proc = subprocess.run(
        [sys.executable, "-c", RECORD, json.dumps(args)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    return np.load(out), info


def _report(name: str, value: float) -> None:
    print(f"{name}: {value:.5f}")  # visible with -s; the figures go into the issue notes


@pytest.mark.mic
def test_virtual_mic_recording_matches_the_wav(pulse_mic: PulseMic, tmp_path: Path) -> None:
    audio, info = record(pulse_mic.env, tmp_path / "rec.npy")
    assert info["devices"], "PortAudio saw no device through PulseAudio"
    assert audio.dtype == np.float32 and audio.size == 56000  # 3.5 s at 16 kHz
    tail = audio[8000:]  # skip the stream's first 0.5 s (device start-up)
    corr, _ = best_alignment(tail, load_audio(JFK))
    control, _ = best_alignment(tail, load_audio(OTHER))
    _report("mic vs played wav", corr)
    _report("mic vs other wav (control)", control)
    assert corr > 0.9
    assert control < 0.5
    assert info["overflows"] == 0 and info["dropped"] == 0


@pytest.mark.mic
def test_virtual_mic_by_name_at_requested_rate(pulse_mic: PulseMic, tmp_path: Path) -> None:
    pulse_mic.play(OTHER)  # what the microphone hears changes; so must the recording
    audio, info = record(pulse_mic.env, tmp_path / "rec.npy", device="PULSE", rate=48000)
    assert info["device"] == "pulse" and info["capture_rate"] == 48000
    tail = audio[8000:]
    corr, _ = best_alignment(tail, load_audio(OTHER))
    control, _ = best_alignment(tail, load_audio(JFK))
    _report("mic@48k vs played wav", corr)
    _report("mic@48k vs previous wav (control)", control)
    assert corr > 0.9 and control < 0.5


@pytest.mark.mic
def test_device_list_is_rescanned_when_pulseaudio_starts_late(tmp_path: Path) -> None:
    """A long-running process that imported sounddevice first still finds the microphone."""
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    mic = PulseMic()
    script = (
        "import sys, sounddevice as sd\n"
        "print(len(sd.query_devices()), flush=True)\n"
        "sys.stdin.readline()\n"
        "from streamcap.audio import MicSource, list_input_devices\n"
        "print(len(list_input_devices()), flush=True)\n"
        "print(float(abs(MicSource(chunk_s=0.05).record(1.0)).max()), flush=True)\n"
        "import time\n"
        "got = []\n"  # callback mode: chunks arrive on the audio thread
        "with MicSource(chunk_s=0.05, callback=got.append):\n"
        "    t0 = time.monotonic()\n"  # ~1 s of audio; a generous deadline for a busy machine
        "    while len(got) < 16 and time.monotonic() - t0 < 20:\n"
        "        time.sleep(0.05)\n"
        "print(len(got), sum(c.size for c in got[:-1]) == 800 * (len(got) - 1), flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env={**os.environ, "PULSE_SERVER": mic.server},
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "0"  # imported before PulseAudio: nothing
        mic.start()
        mic.play(JFK)
        out, err = proc.communicate("\n", timeout=60)
        assert proc.returncode == 0, err[-3000:]
        found, peak, n_chunks, exact = out.split()
        assert int(found) >= 1 and float(peak) > 0.1
        assert int(n_chunks) >= 15 and exact == "True"  # at least ~1 s in 50 ms chunks
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        mic.stop()


def test_no_sound_card_raises_no_microphone_error(tmp_path: Path) -> None:
    """The real situation on this machine: no ALSA card and no sound server reachable."""
    cards = Path("/proc/asound/cards")
    if cards.exists() and "no soundcards" not in cards.read_text():
        pytest.skip("this machine has a real sound card")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSE_", "XDG_RUNTIME"))}
    env.update(PULSE_SERVER=f"unix:{tmp_path}/no-such-server", XDG_RUNTIME_DIR=str(tmp_path))
    script = (
        "import json\n"
        "from streamcap.audio import MicSource, NoMicrophoneError, list_input_devices\n"
        "errors = []\n"
        "for device in (None, 'pulse', 0):\n"
        "    try:\n"
        "        MicSource(device).start()\n"
        "    except NoMicrophoneError as e:\n"
        "        errors.append(str(e))\n"
        "print(json.dumps({'devices': len(list_input_devices()), 'errors': errors}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["devices"] == 0
    assert result["errors"] == [NO_MIC_MESSAGE] * 3
    assert "\n" not in NO_MIC_MESSAGE


def test_audio_thread_rechunks_drops_oldest_and_flushes() -> None:
    """The PortAudio callback path, driven directly: a sound card cannot exist here, and the
    queue policy is pure logic. 48 kHz blocks of odd sizes in, exact 16 kHz chunks out."""
    from streamcap.audio.resample import StreamResampler

    mic = MicSource(chunk_s=0.1, max_queue_s=0.3)  # room for 3 chunks
    mic._resampler = StreamResampler(48000)  # what start() sets up for a 48 kHz device
    x = load_audio(JFK, sample_rate=48000)[:48000]  # 1 s
    for i in range(0, x.size, 1000):
        mic._on_audio(x[i : i + 1000, None], 1000, None, None)
    mic.stop()  # flushes the resampler and the partial chunk, then ends the stream
    chunks = list(mic)
    assert mic.dropped > 0 and len(chunks) == 3  # newest audio kept, oldest dropped
    assert all(c.size == 1600 for c in chunks)
    np.testing.assert_allclose(chunks[0], load_audio(JFK)[11200:12800], atol=1e-3)
    assert mic.read() is None  # the end marker stays for every later reader
