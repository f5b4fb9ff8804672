"""Plain HTTP on the WebSocket port: pages, static files, health, metrics, subtitles and
transcripts.

Pure functions from a request path to a `websockets` `Response`; the server decides which
requests reach here (those that are not WebSocket upgrades).
"""

from __future__ import annotations

import mimetypes
import re
import sysconfig
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from urllib.parse import unquote

from websockets.datastructures import Headers
from websockets.http11 import Response

#: HTML pages by path.
PAGES = {
    "/": "index.html",
    "/index.html": "index.html",
    "/overlay": "overlay.html",
    "/transcript": "transcript.html",
    "/transcript.html": "transcript.html",
}
SUBTITLE_RE = re.compile(r"/streams/([A-Za-z0-9_-][A-Za-z0-9_.-]{0,63})\.(srt|vtt|txt|md)")
#: Path components of at most 128 characters, at most 8 deep: a longer name is not one of ours,
#: and must not reach the file system (ENAMETOOLONG).
_STATIC_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}(?:/[A-Za-z0-9_.-]{1,128}){0,7}")

# Pages talk to this same server only; an overlay may be framed by anything (OBS, players).
# `connect-src 'self'` covers ws:// and wss:// of the page's own host:port (CSP 3; checked in
# Chromium by tests/web/test_page_hardening.py): the mic page can publish nowhere else, even if
# a script on it tried. The overlay only receives captions, and its documented `server=`
# parameter names another caption server, so its page may open WebSockets elsewhere.
_CSP = (
    "default-src 'self'; connect-src {connect}; img-src 'self' data:; "
    "style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline'; frame-ancestors *"
)
_CONNECT_SRC = {"overlay.html": "'self' ws: wss:"}
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}


def web_dir_candidates() -> list[Path]:
    """Where the pages may live: next to the package (a checkout or an editable install),
    then where a wheel installs them (``share/streamcap/web`` under the environment)."""
    here = Path(__file__).resolve().parents[2] / "web"  # streamcap/server/routes.py -> web/
    schemes = [sysconfig.get_default_scheme(), sysconfig.get_preferred_scheme("user")]
    installed = [
        Path(sysconfig.get_path("data", s)) / "share" / "streamcap" / "web" for s in schemes
    ]
    return [here, *dict.fromkeys(installed)]  # environment, then a ``pip install --user``


def default_web_dir() -> Path:
    """The first candidate that holds the pages (the checkout's path if none does)."""
    candidates = web_dir_candidates()
    return next((p for p in candidates if (p / "index.html").is_file()), candidates[0])


def response(
    status: HTTPStatus,
    body: bytes | str,
    content_type: str = "text/plain; charset=utf-8",
    extra: tuple[tuple[str, str], ...] = (),
) -> Response:
    # "replace": text that is not well-formed Unicode costs a character, not the response
    data = body.encode("utf-8", "replace") if isinstance(body, str) else body
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(data))),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
            ("Connection", "close"),
            *extra,
        ]
    )
    return Response(status.value, status.phrase, headers, data)


def text(status: HTTPStatus, message: str) -> Response:
    return response(status, message.rstrip("\n") + "\n")


def static_file(web_dir: Path, rel: str) -> Response:
    """A file under `web_dir`; only plain names (no `..`, no hidden files) are served."""
    rel = unquote(rel)
    if not _STATIC_RE.fullmatch(rel) or any(p.startswith(".") for p in rel.split("/")):
        return text(HTTPStatus.NOT_FOUND, "not found")
    try:
        root = web_dir.resolve()
        path = (root / rel).resolve()
        if root not in path.parents or not path.is_file():
            return text(HTTPStatus.NOT_FOUND, "not found")
        data = path.read_bytes()
    except OSError:  # unreadable, vanished, a name the file system refuses: not ours to serve
        return text(HTTPStatus.NOT_FOUND, "not found")
    suffix = path.suffix.lower()
    ctype = _TYPES.get(suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    csp = _CSP.format(connect=_CONNECT_SRC.get(path.name, "'self'"))
    extra = (("Content-Security-Policy", csp),) if suffix == ".html" else ()
    return response(HTTPStatus.OK, data, ctype, extra)


#: A stream's files by suffix (`/streams/ID.<kind>`): subtitles, the plain transcript, minutes.
DOWNLOAD_TYPES = {
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
    "txt": "text/plain; charset=utf-8",
    "md": "text/markdown; charset=utf-8",  # RFC 7763
}


def subtitles(kind: str, render: Callable[[], str | bytes], stream: str) -> Response:
    ctype = DOWNLOAD_TYPES[kind]
    disposition = ("Content-Disposition", f'inline; filename="{stream}.{kind}"')
    return response(HTTPStatus.OK, render(), ctype, (disposition,))
