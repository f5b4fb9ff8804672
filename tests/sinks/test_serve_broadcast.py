"""Issue 39, item 3, as a user runs it: `streamcap serve --youtube main --zoom main` (the real
command, the bundled model), the caption URLs in the environment, real speech published at
real time, and two real HTTP receivers on loopback standing in for YouTube's and Zoom's caption
ingestion (the services cannot be reached from here): each gets the stream's finals in the
documented form, in order, and the server's whole output never shows the URLs' keys.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import numpy as np
import pytest
from serverkit import ServeProcess, padded, words
from sinkkit import SECRET, receiver

from streamcap.server.client import publish, ws_url

pytestmark = pytest.mark.model


def test_serve_posts_a_streams_finals_to_youtube_and_zoom(
    speech: dict[str, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiver() as yt, receiver() as zoom:
        monkeypatch.setenv("STREAMCAP_YOUTUBE_URL", yt.url())
        monkeypatch.setenv(
            "STREAMCAP_ZOOM_URL_MAIN", zoom.url("/closedcaption", f"id=9&sig={SECRET}")
        )
        assert os.environ["STREAMCAP_YOUTUBE_URL"].endswith(SECRET)
        srv = ServeProcess("--youtube", "main", "--zoom", "main", "--zoom-lang", "en-US",
                           "--model", "base", "-v")  # fmt: skip
        try:
            url = ws_url(srv.ws, "ingest", "main")
            asyncio.run(publish(url, padded(speech["en_real_jfk"]), 16000))
            posts_yt, posts_zoom = yt.wait_posts(1, 60), zoom.wait_posts(1, 60)
        finally:
            rc = srv.stop()
        out = srv.text()
    assert rc == 0, out
    assert [p.seq for p in posts_yt] == list(range(1, len(posts_yt) + 1))
    assert [p.seq for p in posts_zoom] == list(range(1, len(posts_zoom) + 1))
    yt_text = " ".join(p.body.decode().split("\n")[1] for p in posts_yt)
    zoom_text = " ".join(p.body.decode() for p in posts_zoom)
    assert words(yt_text) == words(zoom_text)
    assert "ask not what your country can do for you" in " ".join(words(yt_text))
    assert {p.query["lang"][0] for p in posts_zoom} == {"en-US"}
    assert SECRET not in out and "closedcaption" not in out
    assert "  sinks      youtube:main, zoom:main" in out  # where captions go, by name only
