"""Issue 37, item 7: the pair of links `serve` prints (mic page and overlay of one stream).

`serve` printed `overlay …/overlay?stream=ID` with a literal `ID`, and the mic page picked a
random stream id per load: a copied overlay link showed a blank overlay. The pair now names
one real stream, the same default the mic page fills in (tests/web/test_overlay_status.py
opens both links in chromium)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from streamcap.server.links import DEFAULT_STREAM, StreamLinks, stream_links

WEB = Path(__file__).resolve().parents[2] / "web"


def test_the_pair_names_the_same_real_stream() -> None:
    links = stream_links("http://127.0.0.1:8765")
    assert links == StreamLinks(
        mic="http://127.0.0.1:8765/?stream=main",
        overlay="http://127.0.0.1:8765/overlay?stream=main",
        transcript="http://127.0.0.1:8765/transcript?stream=main",
    )
    assert "ID" not in links.mic + links.overlay + links.transcript


def test_tokens_go_where_each_page_needs_them_quoted() -> None:
    links = stream_links(
        "https://captions.example:8443/", "standup", publish_token="t&k=1", view_token="v w/+"
    )
    mic, overlay = urlsplit(links.mic), urlsplit(links.overlay)
    assert (mic.scheme, mic.netloc, mic.path) == ("https", "captions.example:8443", "/")
    assert parse_qs(mic.query) == {
        "stream": ["standup"],
        "token": ["t&k=1"],  # the publish token: the mic page publishes
        "view_token": ["v w/+"],  # and shows the captions
    }
    assert overlay.path == "/overlay"
    assert parse_qs(overlay.query) == {"stream": ["standup"], "token": ["v w/+"]}
    transcript = urlsplit(links.transcript)
    assert transcript.path == "/transcript"
    assert parse_qs(transcript.query) == {"stream": ["standup"], "token": ["v w/+"]}


def test_hidden_tokens_for_a_terminal_that_may_be_a_log() -> None:
    links = stream_links(
        "http://h:1", publish_token="secret-p", view_token="secret-v", hidden="<x>"
    )
    assert "secret" not in links.mic + links.overlay + links.transcript
    assert links.mic == "http://h:1/?stream=main&token=<x>&view_token=<x>"
    assert links.overlay == "http://h:1/overlay?stream=main&token=<x>"


@pytest.mark.parametrize("bad", ["", ".hidden", "a b", "x" * 65, "ID?x=1"])
def test_a_stream_id_the_server_would_refuse_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid stream id"):
        stream_links("http://h:1", bad)


def test_the_mic_page_defaults_to_the_same_stream() -> None:
    page = (WEB / "index.html").read_text(encoding="utf-8")
    m = re.search(r'const DEFAULT_STREAM = "([^"]*)";', page)
    assert m is not None and m.group(1) == DEFAULT_STREAM
    assert "Math.random" not in page  # not a new id per load
