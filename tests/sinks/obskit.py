"""The real OBS Studio for tests: Debian's obs-studio under Xvfb (software OpenGL), its own
config folder (a profile streaming a colour scene at 320x180, 10 fps, x264 ultrafast, over RTMP
to a local ffmpeg receiver; its websocket server on a free loopback port with a password), and
what reads the CEA-608 captions back out of the received stream.

Why the reader moves the caption SEI (measured with OBS 29.0.2 and ffmpeg 5.1; docs/obs.md,
"Native captions (CC) in your stream"): OBS appends each caption's SEI NAL unit *after* the
frame's slice (libobs/obs-output.c says so in a TODO), where H.264 wants SEI before the first
slice of the access unit. ffmpeg's H.264 decoder forgets SEI at the start of each packet, so
a caption behind its slice is dropped before it can reach a frame: ffprobe shows no A53
captions and lavfi's ``subcc`` none. The bytes are all there (``GA94`` user data, 608 byte
pairs on field 1). `sei_first` moves each SEI in front of its slice (what the standard asks),
and then ffmpeg's own 608 decoder (``movie=...[out0+subcc]``) reads every caption;
``ffprobe -flags2 +chunks`` (SEI kept across packets) also finds them, a frame late.

OBS's websocket listens on every interface: the password is random and the test stops OBS by
its PID when done. Everything it streams goes to 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("obs", "Xvfb", "ffmpeg")
FPS = 10


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(home: Path, ws_port: int, rtmp_port: int, password: str) -> None:
    """OBS's config folder: global settings with the websocket server, one profile, one
    scene collection (a scene with a colour source)."""
    conf = home / ".config" / "obs-studio"
    profile = conf / "basic" / "profiles" / "Untitled"
    scenes = conf / "basic" / "scenes"
    profile.mkdir(parents=True)
    scenes.mkdir(parents=True)
    (conf / "global.ini").write_text(
        "[General]\nFirstRun=true\nLastVersion=486539264\n"
        "[Basic]\nProfile=Untitled\nProfileDir=Untitled\n"
        "SceneCollection=Untitled\nSceneCollectionFile=Untitled\n"
        "[OBSWebSocket]\nFirstLoad=false\nServerEnabled=true\n"
        f"ServerPort={ws_port}\nAuthRequired=true\nServerPassword={password}\n"
        "AlertsEnabled=false\n"
    )
    (profile / "basic.ini").write_text(
        "[General]\nName=Untitled\n"
        "[Video]\nBaseCX=320\nBaseCY=180\nOutputCX=320\nOutputCY=180\n"
        f"FPSType=1\nFPSInt={FPS}\n"
        "[Output]\nMode=Simple\n"
        "[SimpleOutput]\nStreamEncoder=x264\nPreset=ultrafast\nVBitrate=200\nABitrate=64\n"
        "[Audio]\nSampleRate=48000\nChannelSetup=Mono\n"
    )
    server = {"server": f"rtmp://127.0.0.1:{rtmp_port}/live", "key": "test"}
    (profile / "service.json").write_text(json.dumps({"type": "rtmp_custom", "settings": server}))
    scene = {
        "id": "scene", "name": "Scene", "uuid": "11111111-1111-4111-8111-111111111111",
        "settings": {"items": [{"name": "Colour", "id": 1, "visible": True}], "id_counter": 1},
    }  # fmt: skip
    colour = {
        "id": "color_source_v3", "name": "Colour", "uuid": "22222222-2222-4222-8222-222222222222",
        "settings": {"color": 4278190335, "width": 320, "height": 180},
    }  # fmt: skip
    collection = {
        "name": "Untitled", "current_scene": "Scene", "current_program_scene": "Scene",
        "scene_order": [{"name": "Scene"}], "sources": [scene, colour],
    }  # fmt: skip
    (scenes / "Untitled.json").write_text(json.dumps(collection))


@dataclass
class Obs:
    """A running OBS (its websocket address and password) and its RTMP receiver's file."""

    url: str
    password: str
    received: Path
    obs: subprocess.Popen[bytes]
    receiver: subprocess.Popen[bytes]
    log_dir: Path

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("*.txt")))


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, wait: float = 15) -> None:
    """Stop one process we started, by its PID."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.contextmanager
def running_obs(folder: Path) -> Iterator[Obs]:
    """Xvfb, an ffmpeg RTMP receiver and OBS, all ours, all stopped by PID at the end."""
    home = folder / "home"
    ws_port, rtmp_port = free_port(), free_port()
    password = secrets.token_urlsafe(12)
    write_config(home, ws_port, rtmp_port, password)
    r, w = os.pipe()
    xvfb = subprocess.Popen(
        ["Xvfb", "-displayfd", str(w), "-screen", "0", "640x480x24", "-nolisten", "tcp"],
        pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(w)
    procs: list[subprocess.Popen[bytes]] = [xvfb]
    try:
        with os.fdopen(r) as f:
            display = f.readline().strip()
        assert display, "Xvfb did not start"
        received = folder / "received.flv"
        receiver = subprocess.Popen(
            ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-listen", "1",
             "-i", f"rtmp://127.0.0.1:{rtmp_port}/live/test", "-c", "copy", "-f", "flv",
             "-y", str(received)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        procs.append(receiver)
        env = {
            **os.environ, "HOME": str(home), "DISPLAY": f":{display}",
            "LIBGL_ALWAYS_SOFTWARE": "1", "XDG_CONFIG_HOME": str(home / ".config"),
        }  # fmt: skip
        obs = subprocess.Popen(
            ["obs", "--multi", "--minimize-to-tray", "--disable-updater",
             "--disable-shutdown-check"],
            env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        procs.append(obs)
        log_dir = home / ".config" / "obs-studio" / "logs"
        yield Obs(f"ws://127.0.0.1:{ws_port}", password, received, obs, receiver, log_dir)
    finally:
        for proc in reversed(procs):
            _stop(proc)


def wait_receiver(obs: Obs, timeout: float = 30) -> None:
    """The stream has ended: the receiver wrote its file out and quit."""
    try:
        obs.receiver.wait(timeout)
        assert obs.receiver.stderr is not None
        errors = obs.receiver.stderr.read().decode(errors="replace")
        assert obs.receiver.returncode == 0 or obs.received.stat().st_size > 0, errors
    except subprocess.TimeoutExpired:
        _stop(obs.receiver, signal.SIGINT)


# --------------------------------------------------------------------------- reading it back


def flv_video_nals(data: bytes) -> Iterator[tuple[int, int, list[bytes]]]:
    """(tag offset, tag size, NAL units with their 4-byte lengths) of each AVC NALU tag."""
    pos = 9 + 4  # FLV header, PreviousTagSize0
    while pos + 11 <= len(data):
        size = int.from_bytes(data[pos + 1 : pos + 4], "big")
        body = data[pos + 11 : pos + 11 + size]
        if data[pos] == 9 and len(body) > 5 and body[0] & 0x0F == 7 and body[1] == 1:
            nals, p = [], 5
            while p + 4 <= len(body):
                n = int.from_bytes(body[p : p + 4], "big")
                nals.append(bytes(body[p : p + 4 + n]))
                p += 4 + n
            yield pos, size, nals
        pos += 11 + size + 4


def _kind(nal: bytes) -> int:
    return nal[4] & 0x1F


def caption_seis(data: bytes) -> tuple[int, int]:
    """(SEI units with A/53 captions, how many of them come after their frame's slice)."""
    found = after = 0
    for _, _, nals in flv_video_nals(data):
        slices = [i for i, n in enumerate(nals) if _kind(n) in (1, 5)]
        for i, n in enumerate(nals):
            if _kind(n) == 6 and b"GA94" in n:
                found += 1
                after += bool(slices and i > slices[0])
    return found, after


def sei_first(src: Path, dst: Path) -> None:
    """``src`` with each frame's SEI units moved before its first slice (sizes unchanged)."""
    data = bytearray(src.read_bytes())
    for pos, size, nals in list(flv_video_nals(bytes(data))):
        slices = [i for i, n in enumerate(nals) if _kind(n) in (1, 5)]
        if not slices:
            continue
        late = [n for i, n in enumerate(nals) if _kind(n) == 6 and i > slices[0]]
        rest = [n for i, n in enumerate(nals) if not (_kind(n) == 6 and i > slices[0])]
        order = rest[: slices[0]] + late + rest[slices[0] :]
        data[pos + 11 + 5 : pos + 11 + size] = b"".join(order)
    dst.write_bytes(bytes(data))


@dataclass(frozen=True)
class Cue:
    start: float
    end: float
    rows: tuple[str, ...]


def _seconds(stamp: str) -> float:
    h, m, s = stamp.replace(",", ".").split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def decode_608(flv: Path, folder: Path) -> list[Cue]:
    """The 608 captions of ``flv`` as ffmpeg's decoder reads them (after `sei_first`)."""
    fixed, srt = folder / "sei_first.flv", folder / "captions.srt"
    sei_first(flv, fixed)
    subprocess.run(
        ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-f", "lavfi",
         "-i", f"movie={fixed}[out0+subcc]", "-map", "0:1", "-y", str(srt)],
        check=True, timeout=120,
    )  # fmt: skip
    cues = []
    for block in srt.read_text(encoding="utf-8").strip().split("\n\n"):
        lines = block.splitlines()
        if len(lines) < 3:
            continue
        start, end = (_seconds(x.strip()) for x in lines[1].split("-->"))
        # two screens decoded from one frame's captions are one cue of two <font> runs
        for screen in re.split(r"</font>\s*(?=<font)", "\n".join(lines[2:])):
            text = re.sub(r"<[^>]+>|\{\\[^}]*\}", "", screen)
            cues.append(Cue(start, end, tuple(row.rstrip() for row in text.split("\n"))))
    return cues


def a53_frames(flv: Path, chunks: bool) -> int:
    """Frames ffprobe finds A/53 captions on (``chunks``: with ``-flags2 +chunks``)."""
    out = subprocess.run(
        ["ffprobe", "-hide_banner", "-loglevel", "error", *(["-flags2", "+chunks"] * chunks),
         "-select_streams", "v", "-show_frames", "-show_entries", "frame_side_data=side_data_type",
         str(flv)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return out.stdout.count("ATSC A53")


def wait_until(check: object, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not callable(check) or not check():
        assert time.monotonic() < end, f"timed out: {what}"
        time.sleep(0.2)
