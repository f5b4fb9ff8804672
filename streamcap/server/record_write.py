"""`--record DIR`, the writing side: finals appended, seq reservations kept (see `record`).

Its own piece because writing has rules of its own: a line is appended whole or not at all (a
write cut short by a full disk is taken back, and a torn last line from a crash is ended before
the next), only regular files are opened (a FIFO named like a recording blocked the server:
red-team round 4, bug 13), and a file that cannot be written is logged once, when it starts
failing, and once when it works again, never per event (bug 5; a read-only folder logged an
error per caption). Blocking: one thread at a time, in order (`record_io.RecordingIO`), except
`reservation`, which is bookkeeping for the event loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

from streamcap.core.captions import Caption, CaptionLog

from .ratelog import RateLimitedLog
from .record_index import NotRegularFile, open_regular
from .record_lines import MAX_SEQ
from .request import STREAM_ID_RE

log = logging.getLogger("streamcap.server.record")
_rlog = RateLimitedLog(log, interval_s=60.0, burst=3)

#: Seqs reserved per write of the `.seq.json` file.
SEQ_BLOCK = 256


def _write_all(fd: int, data: bytes) -> None:
    """`data` appended whole, or not at all: a write cut short (a full disk) is taken back,
    so the next line does not continue a torn one."""
    done = 0
    try:
        while done < len(data):
            done += os.write(fd, data[done:])
    except OSError:
        if done:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, os.fstat(fd).st_size - done)
        raise


class RecordWriter:
    """Appends the finals of one server's streams and keeps their seq reservations."""

    def __init__(self, root: Path, *, block: int = SEQ_BLOCK) -> None:
        self.root = root
        self.block = block
        self._files: dict[str, int] = {}
        #: file name -> writes that failed since it started failing (logged once, then)
        self._failing: dict[str, int] = {}
        self._reserved: dict[str, int] = {}
        self._epochs: dict[str, str] = {}

    def _jsonl(self, stream: str) -> Path:
        return self.root / f"{stream}.jsonl"

    def _seq_file(self, stream: str) -> Path:
        return self.root / f"{stream}.seq.json"

    # ------------------------------------------------------------------ reservations

    def reservation(self, stream: str, epoch: str, last_seq: int) -> int | None:
        """With each new event numbered (`last_seq`): the seq to reserve now (write it with
        `write_seq` at once), or None. Bookkeeping only: the event loop calls it."""
        if self._epochs.get(stream) != epoch:  # a new log under this id
            self._epochs[stream] = epoch
            self._reserved[stream] = 0
        if last_seq > self._reserved[stream] - self.block // 2:
            self._reserved[stream] = min(last_seq + self.block, MAX_SEQ)
            return self._reserved[stream]
        return None

    def restored(self, stream: str, epoch: str, last_seq: int) -> None:
        """Log `epoch` of `stream`, read back, continues after `last_seq` (what its file
        reserves): the next event reserves a new block; reading writes nothing."""
        self._epochs[stream] = epoch
        self._reserved[stream] = last_seq

    def issued(self, stream: str, epoch: str) -> bool:
        """Whether seqs of log `epoch` of `stream` were reserved (its exact last seq is
        written at a clean shutdown)."""
        return self._epochs.get(stream) == epoch

    def before_send(self, clog: CaptionLog) -> None:
        """Call with each new event numbered, before anyone can see it (blocking)."""
        reserved = self.reservation(clog.stream, clog.epoch, clog.last_seq)
        if reserved is not None:
            self.write_seq(clog.stream, clog.epoch, reserved)

    # ------------------------------------------------------------------ writing

    def write_seq(self, stream: str, epoch: str, reserved: int) -> None:
        """Rewrite the stream's `.seq.json` (atomically)."""
        path = self._seq_file(stream)
        tmp = path.with_name(path.name + ".tmp")
        data = json.dumps({"epoch": epoch, "reserved": reserved}).encode("utf-8")
        try:
            fd = open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            assert fd is not None
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as e:
            if not isinstance(e, NotRegularFile):
                with contextlib.suppress(OSError):
                    tmp.unlink()
            self._failed(path.name, e)
            return
        self._written(path.name)

    def write(self, cap: Caption) -> None:
        """Append one final to the stream's JSONL."""
        stream = cap.stream
        if not STREAM_ID_RE.fullmatch(stream):
            return
        try:
            data = (cap.to_json() + "\n").encode("utf-8")
        except ValueError as e:  # text that cannot be encoded: this event only
            _rlog.error(
                f"write:{stream}", "recording %s: seq %d not recorded: %s", stream, cap.seq, e
            )
            return
        self._append(stream, data)

    def write_names(self, stream: str, names: dict[str, str], at: float) -> None:
        """Append a rename to the stream's JSONL: the whole names map from now on
        (``{"type": "names", "names": {...}, "at": unix time}``; `names.py`), which reading
        back restores (`record_lines.parse_names`)."""
        if not STREAM_ID_RE.fullmatch(stream):
            return
        line = {"type": "names", "names": names, "at": round(at, 3)}
        was_open = stream in self._files
        self._append(stream, (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8"))
        if not was_open:  # an ended stream renamed: its file is not kept open for nothing
            self.close_stream(stream)

    def _append(self, stream: str, data: bytes) -> None:
        name = f"{stream}.jsonl"
        try:
            fd = self._files.get(stream)
            if fd is None:
                fd = self._open_for_append(stream)
            _write_all(fd, data)
        except OSError as e:
            self._failed(name, e)
            return
        self._written(name)

    def _open_for_append(self, stream: str) -> int:
        fd = open_regular(self._jsonl(stream), os.O_RDWR | os.O_APPEND | os.O_CREAT)
        assert fd is not None
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                _write_all(fd, b"\n")  # a torn last line (a crash) stays a line of its own
        except OSError:
            os.close(fd)
            raise
        self._files[stream] = fd
        return fd

    def _failed(self, name: str, error: OSError) -> None:
        n = self._failing.get(name)
        if n is None:
            _rlog.error(
                "record-failed",
                "recording: cannot write %s (%s); events are not recorded until it can be",
                name,
                error.strerror or error,
            )
        self._failing[name] = (n or 0) + 1

    def _written(self, name: str) -> None:
        n = self._failing.pop(name, None)
        if n is not None:
            _rlog.warning(
                "record-ok", "recording: %s is written again (%d write(s) failed before)", name, n
            )

    def close_stream(self, stream: str) -> None:
        """The stream's file closes (its last publisher has gone)."""
        fd = self._files.pop(stream, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError as e:
                self._failed(f"{stream}.jsonl", e)

    def close_files(self) -> None:
        for stream in list(self._files):
            self.close_stream(stream)

    def close(self, logs: list[CaptionLog]) -> None:
        """Clean shutdown: close files, reserve exactly what was issued (no gap next run)."""
        self.close_files()
        for clog in logs:
            if self.issued(clog.stream, clog.epoch) and clog.last_seq:
                self.write_seq(clog.stream, clog.epoch, clog.last_seq)
