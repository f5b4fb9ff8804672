"""How the server refuses a client: counted, logged, told why, and let go of quickly.

Every refusal passes here, whoever decides it: the accept (`accept.py`), the request gate
(`gate.py`), a handshake (`app.py`), a publisher's claim (`publishers.py`), a session
(`ingest.py`, `viewers.py`). So each is counted under one of `metrics.CLOSE_REASONS`, logged
at a bounded rate (a client can trigger it thousands of times a second), never with a token,
and a refused WebSocket holds the server for half a second at most.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from .close import ProtocolError
from .metrics import ServerMetrics
from .protocol import error_message
from .ratelog import RateLimitedLog

#: How long a refused client has to answer our close frame before its socket is dropped.
REFUSE_CLOSE_TIMEOUT_S = 0.5


class Refusals:
    """`refused` counts and logs a refusal; `refuse` also tells a WebSocket client and closes."""

    def __init__(self, metrics: ServerMetrics, rlog: RateLimitedLog) -> None:
        self.metrics = metrics
        self.rlog = rlog

    def refused(self, label: str, detail: str = "", stream: str | None = None) -> None:
        """Count a refusal and log it (rate-limited per reason; never a token)."""
        self.metrics.refuse(label)
        where = f" stream {stream}" if stream else ""
        more = f" ({detail})" if detail else ""
        self.rlog.info(f"refused:{label}", "refused%s: %s%s", where, label, more)

    async def refuse(
        self, ws: ServerConnection, err: ProtocolError, label: str, stream: str | None = None
    ) -> None:
        route = urlsplit(ws.request.path).path if ws.request is not None else "?"
        self.refused(label, f"{route} {err.code}: {err.reason[:100]}", stream)
        # A refused client gets its close frame but not 10 s of our reading: a flooder keeps
        # sending until it sees the close, and every frame of that would still be parsed.
        ws.close_timeout = min(ws.close_timeout or REFUSE_CLOSE_TIMEOUT_S, REFUSE_CLOSE_TIMEOUT_S)
        try:
            await ws.send(error_message(err.code, err.reason))
            if label == "flood" and isinstance(ws.transport, asyncio.ReadTransport):
                ws.transport.pause_reading()  # what it keeps sending is not even read
            await ws.close(err.code, err.close_reason)
        except ConnectionClosed:
            pass
