"""One publisher connection: from the handshake to the last final of its audio.

A connection *claims* its place in the room at its valid `start` message, which must come
within `start_timeout_s` (a refusal that is certain earlier — a taken URL name, a full room —
comes at once): a socket that never starts holds no stream slot. The stream exists for
viewers, subtitles and recording from that start on. The receive loop
runs as a task of its own so that it can be stopped from outside — at shutdown, or when the
same publisher reconnects and takes the stream over — and whatever way it ends (stop message,
drop, error, stop from outside), `run` finalises the open utterance and waits until its final is
in the stream's log before the connection closes and the claim is released, and `done` is set
whatever happens on the way (a takeover and the shutdown wait for it: a full disk once kept
them waiting a minute, red-team round 4, bug 5).

A publisher that goes quiet mid-sentence with its socket open (a muted microphone, a stalled
sender) has its open utterance ended after `utterance_idle_s` without audio, as silence would
end it (`LiveStream.pause`: what the resampler holds goes in first), so its last words become
a final within seconds instead of a partial until the idle timeout; the stream goes on when
audio comes back, its times counting the audio received.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from streamcap.audio.resample import StreamResampler

from .close import CloseCode, ProtocolError, Refused
from .config import LiveStreamLike
from .hub import Publication, StreamEntry
from .protocol import IngestPhase, IngestState, StartMessage, error_message, ready_message
from .services import PublisherServices

log = logging.getLogger("streamcap.server")


def _label(err: ProtocolError, default: str) -> str:
    if isinstance(err, Refused):
        return err.label
    if err.code == CloseCode.MESSAGE_TOO_BIG:
        return "too_big"
    if err.code == CloseCode.UNSUPPORTED_DATA:
        return "bad_data"
    return default


class IngestSession:
    """See the module docstring. `request_stop` ends the receive loop; `done` is set at the end.

    `server` is what it may ask of its server (`services.PublisherServices`), not the server."""

    def __init__(
        self, server: PublisherServices, ws: ServerConnection, stream: str, speaker: str = ""
    ) -> None:
        self.server = server
        self.ws = ws
        self.stream = stream
        #: the publisher's name in its room (the `speaker` query parameter or start field)
        self.speaker = speaker
        self.publication: Publication | None = None
        cfg = server.config
        self.state = IngestState(
            max_frame_bytes=cfg.max_frame_bytes,
            burst_s=cfg.burst_s,
            max_frame_rate=cfg.max_frame_rate,
            frame_burst=cfg.frame_burst,
        )
        self.entry: StreamEntry | None = None
        self.live: LiveStreamLike | None = None
        self.resampler: StreamResampler | None = None
        self.done = asyncio.Event()
        self._stopping = asyncio.Event()
        self._stop_waiter: asyncio.Task[Any] | None = None
        self._stop: tuple[int, str] | None = None
        #: The last finals were not out within `finish_timeout_s` (they follow later).
        self.late = False
        #: audio fed since the open utterance was last ended for a quiet publisher, and when
        self._unended = False
        self._last_audio = 0.0

    @property
    def connected(self) -> bool:
        """The publisher's socket is still open (not closing, not dropped)."""
        return self.ws.protocol.state is State.OPEN

    def request_stop(self, code: int, reason: str) -> None:
        """Stop reading; the audio so far is finalised, then the socket closes with `code`."""
        if self._stop is None:
            self._stop = (code, reason)
        self._stopping.set()

    # ------------------------------------------------------------------ run

    async def run(self) -> None:
        outcome = "stopped_by_server"
        try:
            if self._stop is None:
                waiter = self._stop_waiter = asyncio.create_task(self._stopping.wait())
                try:
                    outcome = await self._receive()
                finally:
                    waiter.cancel()
        finally:
            # after a stop, what the client still sends is read and dropped while the finals
            # decode: frames left unread fill the connection's queue, and then its pings go
            # unanswered too (a page that kept sending silence was closed 1011 "keepalive ping
            # timeout" instead of 1000 "stopped" when the finals took long)
            drain = asyncio.create_task(self._discard()) if outcome == "stop" else None
            try:
                await self._finish()
                if drain is not None:
                    drain.cancel()
                await self._close(outcome)
            finally:
                self.done.set()

    async def _recv(self, timeout: float) -> str | bytes | None:
        """The next message; None once `request_stop` was called. The pending receive is left
        to the close that follows (cancelling a `wait_for` around `recv` from another task
        was not reliable here: the stop could wait for the idle timeout)."""
        stop = self._stop_waiter  # one waiter for the whole session, not one per message
        if stop is None or stop.done():
            return None
        recv: asyncio.Task[Any] = asyncio.create_task(self.ws.recv())
        done, _ = await asyncio.wait(
            {recv, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if recv in done:
            return recv.result()
        recv.cancel()
        if stop in done:
            return None
        raise asyncio.TimeoutError

    async def _receive(self) -> str:
        """The receive loop; returns how it ended: "stop", "dropped" or "refused"."""
        cfg = self.server.config
        state = self.state
        ws = self.ws
        last = time.monotonic()  # the last message
        try:
            while True:
                waiting_start = state.phase is IngestPhase.AWAITING_START
                quiet = False
                if waiting_start:
                    timeout = cfg.start_timeout_s
                else:
                    timeout, quiet = self._wait_s(time.monotonic(), last)
                try:
                    msg = await self._recv(timeout)
                except asyncio.TimeoutError:
                    if quiet:  # no audio for a while, mid-utterance: as if it fell silent
                        self._end_utterance()
                        continue
                    what = "no start message" if waiting_start else "nothing received"
                    limit = cfg.start_timeout_s if waiting_start else cfg.idle_timeout_s
                    err = ProtocolError(CloseCode.POLICY_VIOLATION, f"{what} for {limit:g} s")
                    await self.server.refuse(ws, err, "start_timeout" if waiting_start else "idle")
                    return "refused"
                except ConnectionClosed:
                    return "dropped"  # abrupt or not: the utterance is still finalised
                if msg is None:
                    return "stopped_by_server"
                now = last = time.monotonic()
                if isinstance(msg, str):
                    m = state.receive_text(msg, now)
                    if isinstance(m, StartMessage):
                        if self.speaker and m.speaker and m.speaker != self.speaker:
                            why = (
                                f"start message names speaker {m.speaker!r}, "
                                f"the URL {self.speaker!r}"
                            )
                            raise ProtocolError(CloseCode.UNSUPPORTED_DATA, why)
                        # its place in the room, by the one claim rule (Refused if not)
                        await self.server.claim(self, m.speaker or self.speaker)
                        # a recorded stream is read back (off the loop) before it continues
                        found = await self.server.hub.open(self.stream)
                        self._begin(m, found)
                        try:
                            at = self.publication.time_offset if self.publication else None
                            epoch = self.entry.log.epoch if self.entry else ""
                            await ws.send(ready_message(self.stream, m.sample_rate, at, epoch))
                        except ConnectionClosed:  # reset right after its start: not our bug
                            return "dropped"
                        continue
                    return "stop"
                samples = state.receive_bytes(msg, now)
                assert self.live is not None and self.resampler is not None
                assert state.start is not None
                self.server.metrics.audio_seconds.inc(len(samples) / state.start.sample_rate)
                out = self.resampler.process(samples)
                if out.size:
                    self.live.feed(out)
                    self._unended, self._last_audio = True, now
        except ProtocolError as e:
            await self.server.refuse(ws, e, _label(e, "flood"), stream=self.stream)
            return "refused"
        except ConnectionClosed:  # any send to a publisher that has gone
            return "dropped"
        except Exception:
            log.exception("ingest %s failed", self.stream)
            err = ProtocolError(CloseCode.INTERNAL_ERROR, "internal server error")
            await self.server.refuse(ws, err, "internal", stream=self.stream)
            return "refused"

    def _wait_s(self, now: float, last: float) -> tuple[float, bool]:
        """How long to wait for the next message (the last came at `last`), and whether that
        wait ends an open utterance (True: no audio for `utterance_idle_s`, empty frames or
        not) or the publisher (the idle timeout: no message at all)."""
        cfg = self.server.config
        idle = cfg.idle_timeout_s - (now - last)
        pad = cfg.utterance_idle_s
        if self._unended and pad is not None:
            quiet = pad - (now - self._last_audio)
            if quiet < idle:
                return max(0.0, quiet), True
        return max(0.0, idle), False

    def _end_utterance(self) -> None:
        """The publisher has sent no audio for `utterance_idle_s`: end the open utterance as
        silence would (what the resampler holds goes in first), so its final comes."""
        self._unended = False
        live, resampler = self.live, self.resampler
        if live is None or resampler is None:
            return
        tail = resampler.flush()
        if tail.size:
            live.feed(tail)
        live.pause()

    def _begin(self, start: StartMessage, found: StreamEntry | None = None) -> None:
        """A valid start: from here on the stream exists (log, viewers, subtitles, recording).
        `found`: the stream's entry as `hub.open` read it back."""
        server = self.server
        entry = server.hub.entry(self.stream, found)
        pub = self.publication = entry.begin_session(self.speaker)
        self.entry = entry
        try:
            self.live = server.stream_factory(
                self.stream, start, server.caption_callback(entry, pub)
            )
            if hasattr(self.live, "on_pace"):  # a `LiveStream`: it says when it falls behind
                self.live.on_pace = server.pace_callback(entry)
            protocol = getattr(self.live, "protocol", None)  # ... and where it heard no speech
            if protocol is not None:
                pub.quiet = lambda: protocol.quiet
        except BaseException:
            entry.end_session(pub, 0.0)
            server.hub.release(entry)
            self.entry = None
            raise
        server.streams_changed()
        self.resampler = StreamResampler(start.sample_rate)
        server.rlog.info(
            "stream_start",
            "stream %s%s started (%d Hz %s, %s, language %s, session %d)",
            self.stream,
            f" speaker {self.speaker!r}" if self.speaker else "",
            start.sample_rate,
            start.format,
            "stereo" if start.channels == 2 else "mono",
            start.language or "auto",
            entry.sessions,
        )

    async def _discard(self) -> None:
        """Read and drop whatever comes until the connection closes (or this is cancelled)."""
        with contextlib.suppress(Exception):
            while True:
                await self.ws.recv()

    async def _finish(self) -> None:
        """Flush the resampler, finalise the open utterance, wait until its final is out."""
        live = self.live
        if live is None:
            return
        try:
            if self.resampler is not None:
                tail = self.resampler.flush()
                if tail.size:
                    live.feed(tail)
            live.finish()
            timeout = self.server.config.finish_timeout_s
            if not await asyncio.to_thread(live.wait_idle, timeout):
                # never close with "stopped" (every final out) when that is not true: the
                # finals still go to viewers and the recording when the worker gets to them
                self.late = True
                log.warning(
                    "stream %s: finals still decoding %g s after the publisher stopped "
                    "(worker overloaded); viewers get them when they are ready",
                    self.stream,
                    timeout,
                )
        except Exception:
            log.exception("finishing stream %s failed", self.stream)
        # Captions the worker posted before it went idle are queued ahead of us: let them run.
        await asyncio.sleep(0)

    def _leave(self, entry: StreamEntry) -> None:
        """The publication ends: the room's time moves on, its recording closes if it was the
        last one (handed to the recording's thread: never raises), the hub may forget it."""
        server = self.server
        assert self.publication is not None
        entry.end_session(self.publication, self.state.audio_seconds)
        server.streams_changed()
        if not entry.publishing:  # the room's last publisher: its log file closes
            server.stream_closed(self.stream)
        else:  # the others go on: what waits for this one's words is decided now
            server.publisher_left(self.stream)
        server.hub.release(entry)

    def _decode_failure(self) -> str | None:
        """What went wrong in the stream's pipeline (its `errors`), or None if nothing did."""
        errors = getattr(self.live, "errors", None)
        if not errors:
            return None
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return f"{type(first).__name__}: {str(first)[:60]}{more}"

    async def _close(self, outcome: str) -> None:
        server = self.server
        entry = self.entry
        if entry is not None:
            try:
                self._leave(entry)
            except Exception:  # the connection still closes as it should
                log.exception("stream %s: leaving the room failed", self.stream)
            server.rlog.info(
                "stream_stop",
                "stream %s%s stopped (%s; %.1f s of audio, last seq %d)",
                self.stream,
                f" speaker {self.speaker!r}" if self.speaker else "",
                outcome.replace("_", " "),
                self.state.audio_seconds,
                entry.log.last_seq,
            )
        failed = self._decode_failure()
        with contextlib.suppress(ConnectionClosed):
            if outcome == "stop" and failed is not None:
                # never "stopped" (every final out) when decodes failed: say so
                why = f"decoding failed: {failed}"
                err = ProtocolError(CloseCode.INTERNAL_ERROR, why)
                await self.ws.send(error_message(err.code, err.reason))
                await self.ws.close(err.code, err.close_reason)
            elif outcome == "stop" and self.late:
                why = "overloaded: finals still decoding, viewers get them"
                await self.ws.send(error_message(CloseCode.TRY_AGAIN_LATER, why))
                await self.ws.close(CloseCode.TRY_AGAIN_LATER, why)
            elif outcome == "stop":  # every final of the stream is out: the client may rely on it
                await self.ws.close(CloseCode.NORMAL_CLOSURE, "stopped")
            elif self._stop is not None:
                await self.ws.close(*self._stop)
