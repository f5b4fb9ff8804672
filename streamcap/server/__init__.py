"""WebSocket server: sans-I/O wire protocol (`protocol`) kept apart from the asyncio I/O.

Names are imported on first use (`streamcap._face`): the server pulls in websockets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcap._face import lazy_face

if TYPE_CHECKING:  # what the names are, for type checkers; imported on first use at run time
    from streamcap.server.app import CaptionServer as CaptionServer
    from streamcap.server.client import PublishError as PublishError
    from streamcap.server.client import publish as publish
    from streamcap.server.client import watch as watch
    from streamcap.server.client import ws_url as ws_url
    from streamcap.server.close import CloseCode as CloseCode
    from streamcap.server.config import ServerConfig as ServerConfig
    from streamcap.server.publish_client import Publisher as Publisher
    from streamcap.server.publish_client import PublishRefused as PublishRefused
    from streamcap.server.publish_client import PublishStatus as PublishStatus
    from streamcap.server.publish_client import PublishTarget as PublishTarget
    from streamcap.server.publish_client import follow_captions as follow_captions
    from streamcap.server.thread import ServerThread as ServerThread

#: public name -> the module of this package that defines it
_EXPORTS = {
    "CaptionServer": "app",
    "PublishError": "client",
    "publish": "client",
    "watch": "client",
    "ws_url": "client",
    "CloseCode": "close",
    "ServerConfig": "config",
    "PublishRefused": "publish_client",
    "PublishStatus": "publish_client",
    "PublishTarget": "publish_client",
    "Publisher": "publish_client",
    "follow_captions": "publish_client",
    "ServerThread": "thread",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
