"""A publisher's audio between its capture and the server, kept so nothing is lost when the
connection is (`streamcap publish`). Pure: positions in, positions out.

Audio is numbered by its position: samples at `SAMPLE_RATE` since the capture began. The buffer
holds what was captured and not yet sent (at most `capacity_s`: past that the oldest is dropped
and counted in `lost`, the message a user gets when the server has been away too long) and the
last `keep_s` of what was sent, which the server may not have turned into captions yet: a
server that is stopped finalises what it read, but a publisher's frames may still be in the
socket's buffers, and a killed one loses its open utterance.

Where to resume is the server's to say (`resume_position`): its ``ready`` message gives the
stream time where the new connection's audio begins (docs/protocol.md, "Ingest"). After a
dropped connection that is where the audio it received ends; after a restart from its
recording (``--record``), where its finals end. The difference from the previous connection's
``ready`` time is how much of that connection's audio the server has: the rest is sent again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from streamcap.core.constants import SAMPLE_RATE

__all__ = ["ResumeBuffer", "Session", "resume_position"]


@dataclass(frozen=True)
class Session:
    """One connection as the server answered it: the stream time its audio began at (the
    ``ready`` message's ``time``; None from a server that does not say), the position of the
    first sample sent on it, and the stream's log (``epoch``; "" when not said)."""

    stream_time: float | None
    position: int
    epoch: str = ""


def resume_position(
    previous: Session | None,
    sent: int,
    stream_time: float | None,
    epoch: str = "",
    rate: int = SAMPLE_RATE,
) -> int:
    """Where a new connection, whose ``ready`` said `stream_time` and `epoch`, resumes the
    audio: the previous connection's first position plus what the server has of it, at most
    `sent` (the end of what was sent). When the server cannot say (no time, no earlier
    connection; another log: the server restarted without its recording, whose viewers start
    over anyway; a time before the previous one's), nothing sent is sent again."""
    if previous is None or previous.stream_time is None or stream_time is None:
        return sent
    if epoch and previous.epoch and epoch != previous.epoch:
        return sent
    has = round((stream_time - previous.stream_time) * rate)
    if has < 0:
        return sent
    return previous.position + min(has, sent - previous.position)


class ResumeBuffer:
    """Captured audio not yet sent, and the last `keep_s` of what was (see the module
    docstring). `append` adds captured audio, `take` gives the next to send, `rewind` goes
    back to where a new connection resumes."""

    def __init__(self, capacity_s: float, keep_s: float = 30.0, rate: int = SAMPLE_RATE) -> None:
        if capacity_s <= 0 or keep_s < 0:
            raise ValueError(f"capacity_s must be positive and keep_s >= 0: {capacity_s}, {keep_s}")
        self.rate = rate
        self.capacity = round(capacity_s * rate)
        self.keep = round(keep_s * rate)
        self._chunks: deque[tuple[int, np.ndarray]] = deque()  # (position, samples), in order
        self.start = 0  # the oldest sample held
        self.sent = 0  # the next sample to send
        self.captured = 0  # the end of what was captured
        self.lost = 0  # samples dropped before they were sent (the buffer overflowed)

    @property
    def unsent(self) -> int:
        return self.captured - self.sent

    @property
    def full(self) -> bool:
        """As much unsent audio as it may hold: a source that can wait (a file) waits."""
        return self.unsent >= self.capacity

    def append(self, samples: np.ndarray) -> int:
        """Add captured audio; returns the samples of unsent audio this dropped (the oldest,
        when more than `capacity_s` waits), also counted in `lost`."""
        if samples.size == 0:
            return 0
        self._chunks.append((self.captured, samples))
        self.captured += samples.size
        dropped = 0
        while self.unsent > self.capacity:
            pos, chunk = self._chunks[0]
            over = self.unsent - self.capacity
            end = pos + chunk.size
            if end <= self.sent:  # sent audio kept for a resend: goes first
                self._chunks.popleft()
                self.start = end
                continue
            cut = min(end, max(self.sent, pos) + over)  # drop unsent [sent, cut)
            gone = cut - max(self.sent, pos)
            dropped += gone
            self.sent = cut
            if cut >= end:
                self._chunks.popleft()
                self.start = end
            else:
                self._chunks[0] = (cut, chunk[cut - pos :])
                self.start = cut
        self.lost += dropped
        return dropped

    def take(self, most: int) -> tuple[int, np.ndarray]:
        """Up to `most` samples from `sent` on (their position and the samples; none when
        nothing waits), counted as sent."""
        first = self.sent
        parts: list[np.ndarray] = []
        want = min(most, self.unsent)
        for pos, chunk in self._chunks:
            if want <= 0:
                break
            end = pos + chunk.size
            if end <= self.sent:
                continue
            a = self.sent - pos
            piece = chunk[a : a + want]
            parts.append(piece)
            self.sent += piece.size
            want -= piece.size
        self._forget()
        if not parts:
            return first, np.zeros(0, dtype=np.float32)
        return first, parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _forget(self) -> None:
        """Drop sent audio older than `keep_s` behind `sent`."""
        keep_from = self.sent - self.keep
        while self._chunks:
            pos, chunk = self._chunks[0]
            end = pos + chunk.size
            if end > keep_from:
                if pos < keep_from:
                    self._chunks[0] = (keep_from, chunk[keep_from - pos :])
                    self.start = keep_from
                break
            self._chunks.popleft()
            self.start = end

    def rewind(self, position: int) -> int:
        """Send again from `position` (no further than what was sent); returns the samples
        that cannot be, being no longer held (older than `keep_s`, or dropped)."""
        position = min(position, self.sent)
        short = max(0, self.start - position)
        self.sent = max(position, self.start)
        return short

    def drop_unsent(self) -> int:
        """Forget what was captured and not sent (a file read ahead, when told to stop);
        returns the samples dropped (not counted as lost: nobody wants them)."""
        gone = self.unsent
        while self._chunks and self._chunks[-1][0] >= self.sent:
            self._chunks.pop()
        if self._chunks:
            pos, chunk = self._chunks[-1]
            self._chunks[-1] = (pos, chunk[: self.sent - pos])
        self.captured = self.sent
        return gone

    def seconds(self, samples: int) -> float:
        return samples / self.rate
