"""`streamcap publish` across a server restart, and from what the computer plays.

- The server is stopped mid-publish (SIGTERM, as an operator or systemd does) and started
  again on the same port and ``--record DIR``: the publisher reconnects, sends again what the
  server had not captioned, and the recording's finals cover the whole 30 s clip.
- A PulseAudio monitor source (``--monitor SINK``), a real daemon with a null sink that
  ``paplay`` plays the clip into (`pulse_mic.PulseMic`): the captions say what was played;
  Ctrl-C ends it with every caption out. Then a microphone by name (``--mic pulse``: the
  kit's virtual microphone, which loops the clip).

Real processes, the bundled model, loopback only."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from publishkit import DATA, TOKEN, Publish, coverage, finals, free_port, make_clip
from pulse_mic import SINK, PulseMic, missing_reason
from serverkit import ServeProcess

pytestmark = pytest.mark.model


def test_a_server_restart_mid_publish_loses_no_audio(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "clip.wav")
    record, port = tmp_path / "record", free_port()
    args = ("--port", str(port), "--record", str(record), "--publish-token", TOKEN,
            "--language", "en")  # fmt: skip
    first = ServeProcess(*args)
    second: ServeProcess | None = None
    pub = Publish(str(clip), "--server", first.ws, "--stream", "talk",
                  env={"STREAMCAP_PUBLISH_TOKEN": TOKEN})  # fmt: skip
    try:
        assert pub.wait_for("connected", 60), pub.text()
        time.sleep(12)  # into the second utterance (a publisher runs up to 4 s ahead)
        assert first.stop(signal.SIGTERM) == 0
        assert pub.wait_for("reconnecting", 30), pub.text()
        second = ServeProcess(*args)  # the same port and recording
        assert pub.wait(300) == 0, pub.text()
    finally:
        pub.stop(signal.SIGKILL)
        for srv in (first, second):
            if srv is not None and srv.proc.poll() is None:
                srv.stop()
    lines = pub.text()
    assert "connected again" in lines and "stopped: every caption is out" in lines, lines
    got = finals(record, "talk")
    text = " ".join(f["text"] for f in got)
    cover = coverage(text)
    assert min(cover.values()) >= 0.8, (cover, text)  # every part of the clip, none lost
    starts = [f["start"] for f in got]
    assert starts == sorted(starts) and starts[-1] < 40  # one timeline, no stretch resent twice
    assert TOKEN not in lines


@pytest.mark.mic
def test_publish_what_the_computer_plays_from_a_monitor(tmp_path: Path) -> None:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    with PulseMic() as pulse:
        env = {"PULSE_SERVER": pulse.server}
        listing = Publish("--list", env=env)
        assert listing.wait(60) == 0
        assert f"  {SINK}" in listing.stdout, listing.stdout  # the monitors, by sink name
        srv = ServeProcess("--language", "en", "--record", str(tmp_path))
        pub = Publish("--monitor", SINK, "--server", srv.ws, "--stream", "desk", env=env)
        try:
            assert pub.wait_for("connected", 60), pub.text()
            play = subprocess.run(
                ["paplay", f"--server={pulse.server}", f"--device={SINK}",
                 str(DATA / "en_real_jfk.wav")],
                capture_output=True, timeout=60, env={**env, "HOME": str(tmp_path)},
            )  # fmt: skip
            assert play.returncode == 0, play.stderr
            time.sleep(2.0)  # the last words reach the monitor and the publisher
            pub.stop(signal.SIGINT)  # Ctrl-C: what was captured still goes out
            assert pub.wait(120) == 0, pub.text()
            # a microphone by name: PortAudio's "pulse" device records PulseAudio's default
            # source, the kit's virtual microphone, which hears the clip played in a loop
            pulse.play(DATA / "en_real_jfk.wav")
            mic = Publish("--mic", "pulse", "--server", srv.ws, "--stream", "mic", env=env)
            assert mic.wait_for("connected", 60), mic.text()
            time.sleep(13)
            mic.stop(signal.SIGINT)
            assert mic.wait(120) == 0, mic.text()
        finally:
            pub.stop(signal.SIGKILL)
            srv.stop()
    assert "stopped: every caption is out" in pub.text(), pub.text()
    text = " ".join(f["text"] for f in finals(tmp_path, "desk"))
    assert coverage(text)["en_real_jfk"] > 0.8, text
    assert "microphone 'pulse'" in mic.text()
    heard = " ".join(f["text"] for f in finals(tmp_path, "mic"))
    assert coverage(heard)["en_real_jfk"] > 0.6, heard  # a loop: cut somewhere in it
