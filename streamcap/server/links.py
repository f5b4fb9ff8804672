"""The links a person opens for one stream on this server: its mic page, its overlay and its
transcript.

`serve` prints them at start-up, and they must work as printed: a copied overlay link shows
the stream the mic page publishes, with no `ID` to replace (a newcomer who pasted
`?stream=ID` into OBS got a blank overlay). All name the same stream, `DEFAULT_STREAM`
unless told otherwise, which is also what the mic page fills in when its URL names none
(`web/index.html`; a test keeps the two equal), so they work with or without the link.
Pure: it builds text from the server's address, never reads the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from .request import STREAM_ID_RE

#: The stream the start-up links and the mic page use when none is named: stable from one
#: run to the next (an OBS source keeps working) and readable.
DEFAULT_STREAM = "main"


@dataclass(frozen=True)
class StreamLinks:
    """The mic page that publishes a stream, the overlay that shows it, and the transcript
    page that shows it as turns to read (and links its downloads)."""

    mic: str
    overlay: str
    transcript: str


def stream_links(
    base: str,
    stream: str = DEFAULT_STREAM,
    *,
    publish_token: str | None = None,
    view_token: str | None = None,
    hidden: str | None = None,
) -> StreamLinks:
    """The links of `stream` on the server at `base` (`http://127.0.0.1:8765` or
    `https://host:port`: `CaptionServer.url("")`). The mic page gets both tokens (it
    publishes, and shows the captions), the overlay and the transcript the view token
    only. With `hidden`, a
    token is written as that text (`<hidden>`), for a terminal that may be a log."""
    if not STREAM_ID_RE.fullmatch(stream):
        raise ValueError(
            f"invalid stream id {stream[:80]!r}: use 1-64 characters from A-Z a-z 0-9 _ . - "
            "(not starting with '.')"
        )
    root = base.rstrip("/")

    def query(**params: str | None) -> str:
        return "&".join(
            f"{k}={hidden if hidden is not None and k != 'stream' else quote(v, safe='')}"
            for k, v in params.items()
            if v
        )

    return StreamLinks(
        mic=f"{root}/?{query(stream=stream, token=publish_token, view_token=view_token)}",
        overlay=f"{root}/overlay?{query(stream=stream, token=view_token)}",
        transcript=f"{root}/transcript?{query(stream=stream, token=view_token)}",
    )
