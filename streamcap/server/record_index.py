"""Where the finals of one recording lie in its file, so a read from `since` reads only them.

A stream's recording is read back when a viewer resumes from before the log's memory window,
for its subtitle file, and when the stream is first asked for. Parsing the whole JSONL for each
of those cost a looping client's every request a full parse (red-team round 4, bug 2). So a
recording is parsed once: its `RecordingIndex` keeps, per final, the seq the stream's log
gives it, its byte offset and length, a CRC of its bytes and whether those bytes are exactly
what the server would send for it (`verbatim`). A read then bisects for the seqs it needs and
reads their bytes; a verbatim line whose CRC still matches goes to a viewer as it is
(`RecordedLine`, no parse), any other is parsed and checked again (`record_lines`). Lines
appended later are indexed from where the last scan ended (`scan`); a file replaced or
rewritten in place is noticed (device, inode, size, mtime) and indexed afresh by the caller.

Files are opened only when they are regular files (`open_regular`): a FIFO or a device named
like a recording would block or misbehave (bug 13). Blocking I/O: call off the event loop.
"""

from __future__ import annotations

import bisect
import json
import os
import stat
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from streamcap.core.captions import Caption

from .record_lines import MAX_LINE_BYTES, BadLine, parse_line

#: Bytes read at a time while scanning a file.
_BLOCK = 1 << 20
#: One pread of a span of lines reads at most this much (a span longer than that is read in
#: pieces, so reading back a long recording never holds all of it at once).
_SPAN_BYTES = 4 << 20


class NotRegularFile(OSError):
    """A path named like a recording that is not a regular file (a FIFO, a device, a folder)."""


def open_regular(path: Path, flags: int) -> int | None:
    """A file descriptor for `path` if it is a regular file; None if it does not exist (and
    `flags` does not create it); `NotRegularFile` otherwise. Something else is refused before
    it is opened (a FIFO's open blocks until its other side opens), and checked again on the
    descriptor (O_NONBLOCK: a FIFO swapped in between cannot block the open either)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if not flags & os.O_CREAT:
            return None
    else:
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{path.name} is not a regular file")
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(f"{path.name} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def complete_lines(fd: int, start: int) -> Iterator[tuple[int, int, bytes | None]]:
    """(offset, offset after its newline, line without its newline) of every complete line
    from byte `start` on; None for a line longer than `MAX_LINE_BYTES` (not held in memory).
    A last line without its newline is still being written: it is left for a later scan."""
    offset, rest = start, b""
    skipped_from: int | None = None  # where a line too long to keep began
    while block := os.pread(fd, _BLOCK, offset + len(rest)):
        buf = rest + block
        lo = 0
        while (nl := buf.find(b"\n", lo)) >= 0:
            if skipped_from is not None:
                yield skipped_from, offset + nl + 1, None
                skipped_from = None
            else:
                yield offset + lo, offset + nl + 1, buf[lo:nl]
            lo = nl + 1
        offset, rest = offset + lo, buf[lo:]
        if len(rest) > MAX_LINE_BYTES:  # keep looking for its end, without keeping it
            if skipped_from is None:
                skipped_from = offset
            offset, rest = offset + len(rest), b""


@dataclass(frozen=True, slots=True)
class RecordedLine:
    """A recorded final as the bytes a viewer is sent (its line, checked when it was indexed
    and unchanged since): `Caption`'s `seq`, `type` and `to_json` without the parse."""

    seq: int
    line: str
    type: str = "final"

    def to_json(self) -> str:
        return self.line


class RecordingIndex:
    """The finals of one recording in one epoch (see the module docstring). Not thread-safe:
    its `Recorder` serialises the reads of a stream."""

    def __init__(self, stream: str, epoch: str) -> None:
        self.stream = stream
        self.epoch = epoch
        self.seqs = array("q")
        self.offsets = array("q")
        self.lengths = array("I")
        self.crcs = array("I")
        self.verbatim = bytearray()
        #: bytes scanned: everything before this offset is indexed (or was not a final)
        self.size = 0
        #: (st_dev, st_ino, st_mtime_ns) of the file when it was last scanned
        self.ident: tuple[int, int, int] = (0, 0, 0)
        #: where the recording's segment numbers and stream time continue
        self.next_segment = 0
        self.audio_s = 0.0
        #: the names map of the last `names` line (a rename: `record_lines.parse_names`)
        self.names: dict[str, str] = {}
        #: renumbered at load (a recording from before epochs, or a foreign one): its numbers
        #: exist only in this index, which is kept as long as the server runs
        self.renumbered = False

    def __len__(self) -> int:
        return len(self.seqs)

    @property
    def last_seq(self) -> int:
        return self.seqs[-1] if self.seqs else 0

    def add(self, offset: int, line: bytes, cap: Caption, seq: int) -> None:
        """Index `line` (at `offset`) holding `cap`, numbered `seq` in this index's epoch."""
        self.seqs.append(seq)
        self.offsets.append(offset)
        self.lengths.append(len(line))
        self.crcs.append(zlib.crc32(line))
        same = cap.seq == seq and cap.epoch == self.epoch and cap.stream == self.stream
        self.verbatim.append(same and cap.to_json().encode("utf-8") == line)
        self.next_segment = max(self.next_segment, cap.segment + 1)
        self.audio_s = max(self.audio_s, cap.end)

    def renumber(self, epoch: str) -> None:
        """Number every final in file order from 1, in `epoch`."""
        self.rename(epoch)
        self.seqs = array("q", range(1, len(self.seqs) + 1))
        self.renumbered = True

    def rename(self, epoch: str) -> None:
        """The finals are of log `epoch` (their lines say another, or none)."""
        self.epoch = epoch
        self.verbatim = bytearray(len(self.seqs))

    def span(self, after: int, through: int, limit: int | None = None) -> range:
        """Positions of the finals with `after < seq <= through`, at most `limit` of them."""
        lo = bisect.bisect_right(self.seqs, after)
        hi = bisect.bisect_right(self.seqs, through)
        return range(lo, hi if limit is None else min(hi, lo + limit))

    def nbytes(self, positions: range) -> int:
        return sum(self.lengths[positions.start : positions.stop])

    def read(self, fd: int, positions: range, *, raw: bool) -> Iterator[Caption | RecordedLine]:
        """The finals at `positions`, in order: a verbatim line whose bytes are unchanged as
        a `RecordedLine` when `raw`, else as a `Caption` with this index's numbering. A line
        that changed since it was indexed is checked again, and skipped if it is now broken."""
        for lo, hi in _pieces(self, positions):
            start = self.offsets[lo]
            buf = os.pread(fd, self.offsets[hi - 1] + self.lengths[hi - 1] - start, start)
            for k in range(lo, hi):
                at = self.offsets[k] - start
                line = buf[at : at + self.lengths[k]]
                intact = len(line) == self.lengths[k] and zlib.crc32(line) == self.crcs[k]
                if raw and intact and self.verbatim[k]:
                    yield RecordedLine(self.seqs[k], line.decode("utf-8"))
                    continue
                try:
                    cap = _parsed(line) if intact else parse_line(line)
                except BadLine:
                    continue
                if cap is None:
                    continue
                if (cap.seq, cap.epoch, cap.stream) != (self.seqs[k], self.epoch, self.stream):
                    cap = replace(cap, seq=self.seqs[k], epoch=self.epoch, stream=self.stream)
                yield cap


def _pieces(index: RecordingIndex, positions: range) -> Iterator[tuple[int, int]]:
    """`positions` cut into runs of at most `_SPAN_BYTES` of file."""
    lo = positions.start
    while lo < positions.stop:
        hi, size = lo, 0
        while hi < positions.stop and (hi == lo or size + index.lengths[hi] <= _SPAN_BYTES):
            size += index.lengths[hi]
            hi += 1
        yield lo, hi
        lo = hi


def _parsed(line: bytes) -> Caption | None:
    """A line that was checked when it was indexed and has not changed: parsed only."""
    return Caption.from_dict(json.loads(line))
