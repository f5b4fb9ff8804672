"""Zoom's third-party closed captions: a meeting's finals posted to its caption URL (the
host's "Closed caption" > "Set up manual captioner" > "Copy the API token").

As Zoom documents it ("Using a third-party closed captioning service",
support.zoom.us/hc/en-us/articles/115002212983): a continuous sequence of POSTs to that URL
with ``seq`` (grows by one for each POST of new caption data, the same for a retry) and
``lang`` (language and country code: ``en-US``) query parameters, the caption's text as a
``text/plain`` UTF-8 body (not form-encoded); every error code is worth a retry (400: the
meeting has not started yet), with a timeout on every request; and ``/closedcaption/seq``
(GET, same query) answers the seq of the last caption it took, so a restarted server goes on
after it rather than from 1. Finals only, in order, retried with backoff
(`http_post.RetryPolicy`); the URL never reaches a log.
"""

from __future__ import annotations

import re

from streamcap.core.captions import Caption

from .base import SinkSpec
from .http_post import HttpPoster, RetryPolicy, check_http_url, spoken_text, with_query

__all__ = ["ZoomSink", "seq_url"]

#: Zoom's ``lang``: a language code and a country code ("en-US", "de-DE", "zh-CN").
LANG_RE = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})?")
DEFAULT_LANG = "en-US"


def check_lang(lang: str) -> None:
    if not LANG_RE.fullmatch(lang):
        raise ValueError(f"Zoom's caption language is like en-US or de-DE, not {lang!r}")


def seq_url(url: str) -> str:
    """The URL that answers the last seq Zoom took: the caption URL's path + ``/seq``, its
    query kept."""
    base, q, query = url.partition("?")
    return base.rstrip("/") + "/seq" + (q + query if q else "")


class ZoomSink:
    """Posts one stream's finals into a Zoom meeting (see the module docstring). ``spec``:
    the meeting's caption URL as its target; options ``lang`` (default en-US), ``tries`` and
    ``timeout`` (`http_post.RetryPolicy.of`)."""

    wants_partials = False

    def __init__(self, spec: SinkSpec, *, retry: RetryPolicy | None = None) -> None:
        check_http_url(spec.target)
        self.lang = spec.option("lang", DEFAULT_LANG)
        check_lang(self.lang)
        self._name = spec.label
        self._url = spec.target
        self._next_seq: int | None = None  # asked of Zoom at the first caption
        self._http = HttpPoster(self._name, retry or RetryPolicy.of(spec.options))

    @property
    def name(self) -> str:
        return self._name

    @property
    def retried(self) -> int:
        return self._http.retried

    async def _first_seq(self) -> int:
        """After the last seq Zoom took (1 when it does not say: a new meeting)."""
        try:
            answer = await self._http.request("GET", seq_url(self._url))
        except Exception:  # noqa: BLE001 - any failure: start at 1, the posts will tell
            return 1
        text = answer.body.decode("ascii", "replace").strip()
        return int(text) + 1 if answer.status == 200 and text.isdigit() else 1

    async def deliver(self, caption: Caption) -> None:
        if caption.type != "final" or not caption.text.strip():
            return
        if self._next_seq is None:
            self._next_seq = await self._first_seq()
        seq, self._next_seq = self._next_seq, self._next_seq + 1  # new data: the next seq
        url = with_query(self._url, seq=str(seq), lang=self.lang)
        await self._http.post(url, spoken_text(caption).encode("utf-8"), "text/plain")

    async def aclose(self) -> None:
        await self._http.aclose()
