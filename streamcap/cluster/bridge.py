"""The Ray driver of one gateway, in a child process (why: `cluster.transport`).

``python -m streamcap.cluster.bridge FD``: FD is the gateway's end of a socket pair, carrying
pickled messages (`multiprocessing.connection`). The gateway sends a `ClusterSpec`, then
``("decode", ReplicaRequest)`` and finally ``("close",)``. The bridge answers first
``("ready", ReplicaInfo | None, deployed)`` or ``("error", line)``, then
``("reply", ReplicaReply)``, ``("lost", key, reason, detail, None)``,
``("routed", key, replica)`` and ``("status", Status)``.

It connects, deploys the replicas (or attaches to those running), and waits until one runs;
then each request becomes a call on the deployment handle, with the stream as Serve's
``session_id`` (the affinity router's key) and a timeout of its own: Serve waits without end
for a replica, and does not retry a request whose replica died once it was accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

from streamcap.cluster import control
from streamcap.cluster.control import first_line as _first_line
from streamcap.cluster.wire import ClusterSpec, ReplicaRequest

log = logging.getLogger("streamcap.cluster.bridge")


class Bridge:
    def __init__(self, conn: Connection, spec: ClusterSpec) -> None:
        self.conn = conn
        self.spec = spec
        self._lock = threading.Lock()
        self.handle: Any = None
        self.deployed = spec.owner
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closing: asyncio.Event | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def send(self, msg: tuple[Any, ...]) -> None:
        with self._lock, contextlib.suppress(OSError):  # the gateway is gone: we end at EOF
            self.conn.send(msg)

    # ---- connecting

    def connect(self) -> str | None:
        """Connect and deploy or attach; None, or the one line saying why not."""
        error = control.connect(self.spec.address)
        if error is None:
            deployed, error = control.ensure_app(self.spec)
            self.deployed = self.deployed or deployed
        return error or control.wait_running(self.spec)

    # ---- serving

    async def run(self) -> None:
        from ray import serve

        from streamcap.cluster import router
        from streamcap.cluster.replica import DEPLOYMENT

        self.loop = asyncio.get_running_loop()
        self.closing = asyncio.Event()
        handle = serve.get_deployment_handle(DEPLOYMENT, app_name=self.spec.app)
        router.ON_ROUTED = lambda key, replica: self.send(("routed", key, replica))
        info = None
        try:
            info = await asyncio.wait_for(handle.options(method_name="describe").remote(), 60)
        except Exception as e:  # the replica went away meanwhile: no check, carry on
            log.warning("could not ask a replica who it is: %s", e)
        self.handle = handle.options(method_name="decode")
        self.send(("ready", info, self.deployed))
        threading.Thread(target=self.read, name="bridge-reader", daemon=True).start()
        status = asyncio.ensure_future(self.poll_status())
        await self.closing.wait()
        status.cancel()

    def read(self) -> None:
        """The gateway's messages, handed to the loop (EOF: the gateway is gone)."""
        assert self.loop is not None and self.closing is not None
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                msg = ("close",)
            try:
                if msg[0] == "decode":
                    self.loop.call_soon_threadsafe(self.start_decode, msg[1])
                elif msg[0] == "close":
                    self.loop.call_soon_threadsafe(self.closing.set)
                    return
            except RuntimeError:  # the loop has ended
                return

    def start_decode(self, request: ReplicaRequest) -> None:
        task = asyncio.ensure_future(self.decode(request))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def decode(self, request: ReplicaRequest) -> None:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
        from ray.serve.exceptions import BackPressureError

        handle = self.handle.options(session_id=request.stream) if self.spec.affinity else (
            self.handle
        )  # fmt: skip
        response = handle.remote(request)
        try:
            reply = await asyncio.wait_for(response, self.spec.attempt_timeout_s)
        except asyncio.TimeoutError:
            response.cancel()
            self.lost(request, "timeout", f"no reply in {self.spec.attempt_timeout_s:.0f} s")
        except ActorDiedError as e:
            self.lost(request, "died", _first_line(e))
        except ActorUnavailableError as e:
            self.lost(request, "unavailable", _first_line(e))
        except RayActorError as e:
            self.lost(request, "died", _first_line(e))
        except BackPressureError as e:
            self.lost(request, "rejected", _first_line(e))
        except Exception as e:  # anything else: the gateway decides whether to resend
            self.lost(request, "unavailable", f"{type(e).__name__}: {_first_line(e)}")
        else:
            self.send(("reply", reply))

    def lost(self, request: ReplicaRequest, reason: str, detail: str) -> None:
        self.send(("lost", request.key, reason, detail, None))

    async def poll_status(self) -> None:
        assert self.loop is not None
        while True:
            status = await self.loop.run_in_executor(None, control.app_status, self.spec.app)
            self.send(("status", status))
            await asyncio.sleep(self.spec.status_interval_s)

    def shutdown(self) -> None:
        """Delete the app if this gateway deployed it (replicas of `streamcap replicas` and of
        other gateways stay)."""
        if self.deployed:
            control.delete(self.spec.app)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the gateway ends us ("close", or EOF)
    logging.basicConfig(level=logging.WARNING, format="streamcap bridge: %(message)s")
    conn = Connection(socket.socket(fileno=int(argv[0])).detach())
    spec: ClusterSpec = conn.recv()
    bridge = Bridge(conn, spec)
    try:
        error = bridge.connect()
    except Exception as e:
        error = f"cannot use the Ray cluster at {spec.address}: {_first_line(e)}"
    if error is not None:
        bridge.send(("error", error))
        bridge.shutdown()
        return 1
    try:
        asyncio.run(bridge.run())
    finally:
        bridge.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
