"""A `CaptionServer` on its own event loop in a background thread (tests, tools)."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, TypeVar

from .app import CaptionServer
from .config import ServerConfig

if TYPE_CHECKING:
    from streamcap.runtime.worker_api import Worker

__all__ = ["ServerThread"]

T = TypeVar("T")


class ServerThread:
    """A `CaptionServer` on its own event loop in a background thread (tests, tools).

    `with ServerThread(config, worker) as srv: srv.url(...)`.
    """

    def __init__(self, config: ServerConfig, worker: Worker, **kwargs: Any) -> None:
        self.config = config
        self.worker = worker
        self._kwargs = kwargs
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.server: CaptionServer | None = None
        self._thread = threading.Thread(target=self._run, name="caption-server", daemon=True)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            self.server = CaptionServer(self.config, self.worker, **self._kwargs)
            await self.server.start()
        except BaseException as e:  # noqa: BLE001 - re-raised in start()
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        await self._stop.wait()
        await self.server.close()

    def start(self) -> ServerThread:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=120)

    def url(self, path: str = "/", *, websocket: bool = False) -> str:
        assert self.server is not None
        return self.server.url(path, websocket=websocket)

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
