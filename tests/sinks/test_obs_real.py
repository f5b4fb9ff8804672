"""Issue 39, item 2, end to end with the real OBS: a real server with the bundled model captions
real speech (three clips, about 25 s), its OBS sink sends the stream's captions to Debian's OBS
Studio 29 over obs-websocket (with a password), OBS streams a colour scene over RTMP to a local
ffmpeg receiver, and the CEA-608 captions read back out of the received H.264 are the
stream's finals: the same words in the same order, in rows of at most 32 characters, two rows
a screen, paced at the rate 608 carries. How they are read, and why ffmpeg needs the caption
SEI moved first: tests/sinks/obskit.py.

Skipped only where obs-studio, Xvfb or ffmpeg is not installed (`scripts/setup.sh --test`
installs them).
"""

from __future__ import annotations

import asyncio
import difflib
import re
import time
from typing import Any

import numpy as np
import pytest
from obskit import FPS, Obs, a53_frames, caption_seis, decode_608, missing_tools, running_obs
from obskit import wait_receiver as receiver_done
from serverkit import PUB, SR, VIEW, Collector, padded, run_publish
from sinkkit import all_logs

from streamcap.core.cea608 import ROW_CHARS, RollUpConfig, screen_pairs, to_608
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread
from streamcap.sinks.base import SinkSpec
from streamcap.sinks.obs import ObsClient

pytestmark = [
    pytest.mark.obs,
    pytest.mark.model,
    pytest.mark.skipif(
        bool(missing_tools()),
        reason=f"needs {', '.join(missing_tools())} (Debian obs-studio, xvfb, ffmpeg; "
        "scripts/setup.sh --test installs them)",
    ),
]

CLIPS = ("en_real_jfk", "en_real_librivox_0870", "en_real_librivox_0880")


def norm(text: str) -> list[str]:
    """Words for comparing: lower case, 608's apostrophe as ASCII, no punctuation."""
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("’", "'")).split()


def running_text(cues: list[tuple[str, ...]]) -> list[str]:
    """The rows a viewer saw, each once (a screen is the tail of the text, its bottom row
    maybe grown: the reading of tests/core/test_cea608.py)."""
    rows: list[str] = []
    for screen in cues:
        for row in screen:
            if row in rows[-4:]:
                continue
            if rows and row.startswith(rows[-1]):
                rows[-1] = row
            else:
                rows.append(row)
    return rows


async def control(obs: Obs, request: str, until_active: bool | None = None) -> None:
    """A request to OBS (connecting while it starts up), then wait for its output state."""
    end = time.monotonic() + 90
    while True:
        try:
            client = await ObsClient.open(obs.url, obs.password)
            break
        except OSError:
            assert obs.obs.poll() is None, "OBS exited"
            assert time.monotonic() < end, "OBS's websocket never answered"
            await asyncio.sleep(0.5)
    try:
        assert await client.request(request) == 100
        while until_active is not None:
            code, status = await client.call("GetStreamStatus")
            assert code == 100
            if status["outputActive"] == until_active and (
                not until_active or status["outputBytes"] > 0
            ):
                break
            assert time.monotonic() < end, f"{request}: the stream never changed ({status})"
            await asyncio.sleep(0.3)
    finally:
        await client.close()


def test_finals_come_out_of_the_obs_stream_as_608_captions(
    tmp_path: Any, worker: Any, speech: dict[str, np.ndarray]
) -> None:
    gap = np.zeros(SR, np.float32)
    audio = padded(np.concatenate([x for c in CLIPS for x in (speech[c], gap)]))
    clear_s = RollUpConfig().clear_after_s
    with running_obs(tmp_path) as obs:
        asyncio.run(control(obs, "StartStream", until_active=True))
        sink = SinkSpec("obs", "main", obs.url, (("password", obs.password),))
        config = ServerConfig(port=0, publish_token=PUB, view_token=VIEW, sinks=(sink,))
        with all_logs() as logs, ServerThread(config, worker) as srv:
            viewer = Collector(srv, "main")
            run_publish(srv, "main", audio)  # real time; returns after the last final
            assert viewer.wait_for(lambda c: c.finals(), 30)
            time.sleep(clear_s + 3)  # the last screens go out, then the erase
            viewer.stop()
        asyncio.run(control(obs, "StopStream", until_active=False))
        receiver_done(obs)
        obs_log = obs.log_text()
    finals = [e["text"] for e in viewer.finals()]
    data = obs.received.read_bytes()
    seis, behind = caption_seis(data)
    raw, chunked = a53_frames(obs.received, False), a53_frames(obs.received, True)
    cues = decode_608(obs.received, tmp_path)
    screens = [c.rows for c in cues]
    said, seen = norm(" ".join(to_608(f) for f in finals)), norm(" ".join(running_text(screens)))
    match = difflib.SequenceMatcher(a=said, b=seen, autojunk=False).ratio()
    print(
        f"\nOBS: {len(data)} bytes received, {seis} caption SEI ({behind} after their slice); "
        f"ffprobe finds A53 on {raw} frames, {chunked} with -flags2 +chunks; "
        f"decoded {len(cues)} cues; finals {len(said)} words, captions {len(seen)} words, "
        f"match {match:.3f}"
    )
    assert finals and len(said) >= 30, finals
    assert cues, f"no captions read back ({seis} caption SEI in the stream)"
    assert seis >= len(cues)
    # the words: every final's, once, in order
    assert match >= 0.98, (said, seen)
    # 608's rules: rows of at most 32 characters, two of them a screen, the screen erased last
    assert all(len(c.rows) <= 2 and all(len(r) <= ROW_CHARS for r in c.rows) for c in cues)
    assert cues[-1].end - cues[-1].start >= clear_s - 2 / FPS  # held, then erased
    # the rate: each screen had the time 608 needs to carry the one before (a frame's slack)
    for a, b in zip(cues, cues[1:], strict=False):
        assert b.start - a.start >= screen_pairs("\n".join(a.rows)) / (30000 / 1001) - 1 / FPS
    # the password reached no log: neither the server's nor OBS's
    assert obs.password not in logs.text() and obs.password not in obs_log
