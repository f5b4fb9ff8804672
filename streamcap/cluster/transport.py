"""How the gateway's `RemoteWorker` reaches decoders: a transport and the events it reports.

- `BridgeTransport`: Ray Serve replicas, through a child process (`cluster.bridge`) that is the
  Ray driver. The gateway itself never imports Ray: a Ray driver aborts its whole process once
  the cluster's GCS has been gone for a while (measured: "Failed to connect to GCS within 20 s
  ... The program will terminate", exit 1), and the gateway must keep its WebSockets open
  through that. A dead bridge loses its in-flight requests (reported, so finals are resent) and
  is started again with backoff.
- `LocalTransport`: an `InferenceWorker` in this process (``--fallback local``, and the Ray-free
  tests of the scheduler).

Events (`Replied`, `Lost`, `Routed`, `Status`) go to the callback given to ``start`` from the
transport's own thread; `RemoteWorker.on_event` queues them for its dispatcher.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Protocol

from streamcap.errors import UserError
from streamcap.runtime.jobs import DecodeJob, JobOutcome

from .wire import PROTOCOL, ClusterSpec, ReplicaInfo, ReplicaReply, ReplicaRequest, job_of, reply_of

if TYPE_CHECKING:  # the worker imports torch: not at the gateway's import
    from streamcap.runtime.worker import InferenceWorker

__all__ = ["BridgeTransport", "LocalTransport", "Transport"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Replied:
    reply: ReplicaReply


@dataclass(frozen=True)
class Lost:
    """A request that got no reply: ``reason`` is one of `remote.LOST_REASONS`."""

    key: str
    reason: str
    detail: str = ""
    replica: str | None = None


@dataclass(frozen=True)
class Routed:
    """A request accepted by ``replica`` (the bridge's router says)."""

    key: str
    replica: str


@dataclass(frozen=True)
class Status:
    """The cluster as last seen: connected, replicas running (their ids, when known)."""

    connected: bool
    running: int
    target: int = 0
    replicas: frozenset[str] | None = None
    error: str | None = None  # why not connected (one line)


@dataclass(frozen=True)
class Described:
    """A replica said who it is (at connect: model, placement, its warm-up's final cost)."""

    info: ReplicaInfo


TransportEvent = Replied | Lost | Routed | Status | Described
OnEvent = Callable[[TransportEvent], None]


class Transport(Protocol):
    def start(self, on_event: OnEvent) -> None: ...
    def send(self, request: ReplicaRequest) -> None: ...
    def close(self) -> None: ...


class LocalTransport:
    """Decodes on an `InferenceWorker` of this process, as one always-running replica."""

    def __init__(self, worker: InferenceWorker, name: str = "local") -> None:
        self.worker = worker
        engine = worker.engine
        self.info = ReplicaInfo(
            replica=name,
            pid=os.getpid(),
            node="local",
            model=str(engine.main.name),
            device=str(engine.placement.device),
            precision=str(engine.placement.precision),
        )
        self._on_event: OnEvent | None = None

    def start(self, on_event: OnEvent) -> None:
        self._on_event = on_event
        self.worker.start()
        on_event(Described(self.info))
        on_event(Status(True, 1, 1, frozenset([self.info.replica])))

    def send(self, request: ReplicaRequest) -> None:
        def on_done(job: DecodeJob, outcome: JobOutcome) -> None:
            if self._on_event is not None:
                reply = reply_of(request, outcome, self.info, self.worker.queue_depth)
                self._on_event(Replied(reply))

        self.worker.submit(job_of(request, on_done))

    def close(self) -> None:
        self.worker.stop(timeout=30)


class BridgeTransport:
    """Ray Serve replicas through the bridge process (module docstring)."""

    #: a bridge that could not start is tried again after these delays (s), then every 30 s
    BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)

    def __init__(self, spec: ClusterSpec, fingerprint: str = "") -> None:
        self.spec = spec
        self.fingerprint = fingerprint
        self._on_event: OnEvent | None = None
        self._conn: Connection | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._send_lock = threading.Lock()
        self._pending: set[str] = set()  # sent through the current bridge, not yet answered
        self._closing = False
        self.pid = 0

    # the gateway's side of the pipe

    def start(self, on_event: OnEvent) -> None:
        """Start the bridge and wait until it is connected (a `UserError` if it cannot)."""
        self._on_event = on_event
        first = self._spawn()
        if first[0] == "error":
            self._kill()
            raise UserError(str(first[1]))
        self._check(first[1])
        if len(first) > 2 and first[2]:  # this gateway deployed the app: it owns it
            self.spec = replace(self.spec, owner=True)
        if isinstance(first[1], ReplicaInfo):
            on_event(Described(first[1]))
        threading.Thread(target=self._read, name="streamcap-bridge-reader", daemon=True).start()

    def _spawn(self) -> tuple[Any, ...]:
        """A new bridge; returns its first message (("ready", info) or ("error", line))."""
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", "15")
        env.setdefault("RAY_gcs_server_request_timeout_seconds", "15")
        env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "streamcap.cluster.bridge", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            env=env,
            stdin=subprocess.DEVNULL,
            # its own session: a terminal's Ctrl-C reaches the gateway, which drains its
            # finals through the bridge and then closes it, never the bridge first
            start_new_session=True,
        )
        theirs.close()
        self.pid = self._proc.pid
        conn = Connection(ours.detach())
        conn.send(self.spec)
        timeout = self.spec.start_timeout_s + 60
        if not conn.poll(timeout):
            conn.close()
            return ("error", f"the Ray bridge did not answer within {timeout:.0f} s")
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            conn.close()
            code = self._proc.wait(5)
            return ("error", f"the Ray bridge exited ({code}) before connecting")
        if msg[0] == "error":
            conn.close()
            return msg
        self._conn = conn
        self._pending.clear()
        return msg

    def _check(self, info: object) -> None:
        """Refuse replicas of another streamcap protocol or another checkpoint."""
        if not isinstance(info, ReplicaInfo):
            return  # no replica answered yet (still starting): checked by nothing else
        if info.protocol != PROTOCOL:
            self._kill()
            raise UserError(
                f"the replicas run streamcap protocol {info.protocol}, this gateway {PROTOCOL}: "
                "run the same streamcap version on every node"
            )
        if self.fingerprint and info.fingerprint and info.fingerprint != self.fingerprint:
            self._kill()
            raise UserError(
                f"the replicas of app {self.spec.app!r} run model {info.model!r} "
                f"(checkpoint {info.fingerprint}), not this gateway's ({self.fingerprint}): "
                "pass the same --model, or use another --app"
            )

    def send(self, request: ReplicaRequest) -> None:
        conn = self._conn
        if conn is None:
            raise ConnectionError("the Ray bridge is not running")
        with self._send_lock:
            self._pending.add(request.key)
            conn.send(("decode", request))

    def close(self) -> None:
        self._closing = True
        conn = self._conn
        if conn is not None:
            try:
                with self._send_lock:
                    conn.send(("close",))
            except OSError:
                pass
        if self._proc is not None:
            try:
                self._proc.wait(15)
            except subprocess.TimeoutExpired:
                self._kill()

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)

    # the reader thread

    def _emit(self, event: TransportEvent) -> None:
        if self._on_event is not None:
            self._on_event(event)

    def _read(self) -> None:
        while not self._closing:
            conn = self._conn
            try:
                assert conn is not None
                msg = conn.recv()
            except (EOFError, OSError, AssertionError):
                if self._closing:
                    return
                self._bridge_lost()
                continue
            kind = msg[0]
            if kind == "reply":
                self._pending.discard(msg[1].key)
                self._emit(Replied(msg[1]))
            elif kind == "lost":
                self._pending.discard(msg[1])
                self._emit(Lost(msg[1], msg[2], msg[3], msg[4]))
            elif kind == "routed":
                self._emit(Routed(msg[1], msg[2]))
            elif kind == "status":
                self._emit(msg[1])

    def _bridge_lost(self) -> None:
        """The bridge died (the cluster went away, or it crashed): every request it held is
        lost; start a new one until one connects."""
        code = self._proc.poll() if self._proc is not None else None
        log.warning("the Ray bridge exited (%s): %d request(s) lost; reconnecting",
                    code, len(self._pending))  # fmt: skip
        with self._send_lock:
            lost, self._pending = list(self._pending), set()
            self._conn = None
        for key in lost:
            self._emit(Lost(key, "bridge", "the Ray bridge exited"))
        self._emit(Status(False, 0, error="the Ray bridge exited; reconnecting"))
        for attempt in range(10**9):
            if self._closing:
                return
            time.sleep(self.BACKOFF_S[min(attempt, len(self.BACKOFF_S) - 1)])
            if self._closing:
                return
            self._kill()
            first = self._spawn()
            if first[0] != "error":
                log.warning("the Ray bridge is back (pid %d)", self.pid)
                return
            self._emit(Status(False, 0, error=str(first[1])))
            self._kill()
