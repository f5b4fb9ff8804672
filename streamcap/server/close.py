"""How the server ends a connection: the close codes it uses and the error that carries one.

Its own module because every part of the server raises or reads a `ProtocolError` (the sessions,
rooms, the publishers' registry, the refusal counter), most of them without any of the parsing
in `protocol`; and the rules for a client's text (`client_text`) and for a request's path and
token (`request`) raise it too.
"""

from __future__ import annotations

import enum

__all__ = ["CloseCode"]

_MAX_CLOSE_REASON_BYTES = 123  # RFC 6455: control frame payload 125 bytes, minus the code


class CloseCode(enum.IntEnum):
    """WebSocket close codes we use (names as in `websockets.frames.CloseCode`)."""

    NORMAL_CLOSURE = 1000
    GOING_AWAY = 1001
    UNSUPPORTED_DATA = 1003  # bad data: malformed message, wrong order
    POLICY_VIOLATION = 1008  # auth, bad stream id, flooding
    MESSAGE_TOO_BIG = 1009
    INTERNAL_ERROR = 1011
    TRY_AGAIN_LATER = 1013  # the server is full (admission control) or overloaded


class ProtocolError(Exception):
    """A client broke the protocol: close the connection with `code` and `reason`."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{int(code)}: {reason}")
        self.code = int(code)
        self.reason = reason

    @property
    def close_reason(self) -> str:
        """`reason` cut to the 123 UTF-8 bytes a close frame can carry."""
        raw = self.reason.encode("utf-8")
        if len(raw) <= _MAX_CLOSE_REASON_BYTES:
            return self.reason
        return raw[: _MAX_CLOSE_REASON_BYTES - 3].decode("utf-8", "ignore") + "..."


class Refused(ProtocolError):
    """The server turns a well-behaved client away (taken name, full room, limits, load):
    `label` says which, for the refusal counter."""

    def __init__(self, err: ProtocolError, label: str) -> None:
        super().__init__(err.code, err.reason)
        self.label = label


def bad_data(reason: str) -> ProtocolError:
    """The client sent data the protocol does not allow: close with 1003 and `reason`."""
    return ProtocolError(CloseCode.UNSUPPORTED_DATA, reason)
