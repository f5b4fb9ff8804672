"""The Ray Serve backend: inference replicas behind the caption gateway (`streamcap serve
--backend ray`, `streamcap replicas`; docs/scaling.md).

Only this layer imports Ray, and only in `replica`, `bridge` and `router`, which run in Ray's
processes; the gateway side (`remote`, `transport`, `wire`) imports no Ray at all, nor does
this face (names are imported on first use, `streamcap._face`). ``local_head`` (the context
manager) is not among them: its module has the same name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcap._face import lazy_face

if TYPE_CHECKING:  # what the names are, for type checkers; imported on first use at run time
    from streamcap.cluster.local_head import LocalHead as LocalHead
    from streamcap.cluster.local_head import start_head as start_head
    from streamcap.cluster.remote import RemoteWorker as RemoteWorker
    from streamcap.cluster.remote_config import RemoteConfig as RemoteConfig
    from streamcap.cluster.transport import BridgeTransport as BridgeTransport
    from streamcap.cluster.transport import LocalTransport as LocalTransport
    from streamcap.cluster.transport import Transport as Transport
    from streamcap.cluster.wire import ClusterSpec as ClusterSpec
    from streamcap.cluster.wire import ReplicaSpec as ReplicaSpec

#: public name -> the module of this package that defines it
_EXPORTS = {
    "LocalHead": "local_head",
    "start_head": "local_head",
    "RemoteWorker": "remote",
    "RemoteConfig": "remote_config",
    "BridgeTransport": "transport",
    "LocalTransport": "transport",
    "Transport": "transport",
    "ClusterSpec": "wire",
    "ReplicaSpec": "wire",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
