"""`streamcap publish`: audio from this computer into a running caption server's stream or room.

The source is a file (sent at real time), ``-`` (standard input: raw PCM with ``--rate``, or
any container), a URL FFmpeg opens (HTTP, HLS, RTMP, RTSP, SRT), a microphone by name
(``--mic``) or what the computer plays (``--monitor``: a PulseAudio or PipeWire monitor
source, e.g. OBS's mix or the call being listened to). One thread captures it into a bounded
buffer (`audio.capture`); the publisher (`server.publish_client`) sends it, paced under the
server's flood guard, and keeps the stream going across drops and server restarts, sending
again what the server had not captioned. One status line says where it is. The token comes
from ``$STREAMCAP_PUBLISH_TOKEN`` or ``--token`` and is sent in a header, never printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamcap.cli.common import UsageError, say
from streamcap.cli.input_options import (
    STDIN,
    add_raw_flags,
    raw_from_args,
    stdin_is_terminal,
)
from streamcap.cli.languages import resolve_language
from streamcap.cli.numbers import positive_float
from streamcap.core.safe_text import printable

if TYPE_CHECKING:
    from streamcap.audio.capture import Source
    from streamcap.audio.stream_input import RawPcm
    from streamcap.server.publish_client import Publisher, PublishTarget

PROG = "streamcap publish"
DEFAULT_SERVER = "ws://127.0.0.1:8765"
TOKEN_ENV = "STREAMCAP_PUBLISH_TOKEN"
VIEW_TOKEN_ENV = "STREAMCAP_VIEW_TOKEN"


@dataclass(frozen=True)
class PublishCommand:
    """Everything `streamcap publish` is asked, built once from its flags (`from_args`)."""

    source: str | None = None  # a file, a URL or "-"; None with --mic / --monitor
    mic: str | None = None  # --mic NAME ("" the default microphone)
    monitor: str | None = None  # --monitor SINK ("" the default sink)
    raw: RawPcm | None = None
    server: str = DEFAULT_SERVER
    stream: str = "main"
    token: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)  # the start message's extras
    show: bool = False
    view_token: str | None = None
    buffer_s: float = 120.0
    burst_s: float = 5.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> PublishCommand:
        chosen = [x for x in (args.source, args.mic, args.monitor) if x is not None]
        if len(chosen) != 1:
            raise UsageError(
                "give one source: a FILE, a URL, - (standard input), --mic NAME or --monitor"
            )
        if args.source == STDIN and stdin_is_terminal():
            raise UsageError("- reads audio from standard input, which is a terminal: pipe it in")
        given = {
            "language": args.language, "task": args.task, "prompt": args.prompt,
            "vocabulary": args.vocabulary, "speaker": args.speaker, "speakers": args.speakers,
        }  # fmt: skip
        fields: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        return cls(
            source=args.source,
            mic=args.mic,
            monitor=args.monitor,
            raw=raw_from_args(args, [args.source or ""], "--format"),
            server=args.server,
            stream=args.stream,
            token=args.token or os.environ.get(TOKEN_ENV) or None,
            fields=fields,
            show=args.show,
            view_token=args.view_token or os.environ.get(VIEW_TOKEN_ENV) or None,
            buffer_s=args.buffer,
            burst_s=args.burst,
        )


def _language(value: str) -> str:
    if value.strip().lower() == "auto-each":
        return "auto-each"
    try:
        code = resolve_language(value)
    except Exception as e:  # UserError: the closest name
        raise argparse.ArgumentTypeError(str(e)) from None
    assert code is not None
    return code


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument(
        "source", nargs="?", metavar="SOURCE",
        help="a file (sent at real time), a URL (http(s), HLS .m3u8, rtmp://, rtsp://, srt://) "
        "or - (standard input: any container, or raw PCM with --rate)",
    )  # fmt: skip
    g = p.add_argument_group("live sources")
    g.add_argument(
        "--mic", nargs="?", const="", metavar="NAME",
        help="a microphone: a part of its name or its index (alone: the default one)",
    )  # fmt: skip
    g.add_argument(
        "--monitor", nargs="?", const="", metavar="SINK",
        help="what the computer plays into SINK (a PulseAudio/PipeWire sink; alone: the "
        "default output), e.g. OBS's mix or a call",
    )  # fmt: skip
    g.add_argument("--list", action="store_true", help="list microphones and monitors, and exit")
    s = p.add_argument_group("the server and the stream")
    s.add_argument("--server", default=DEFAULT_SERVER, metavar="URL", help="the caption server")
    s.add_argument("--stream", default="main", metavar="ID", help="the stream (a room) to publish")
    s.add_argument(
        "--token", metavar="T",
        help=f"the server's publish token (default: ${TOKEN_ENV}, which keeps it out of the "
        "process list)",
    )  # fmt: skip
    s.add_argument("--speaker", metavar="NAME", help="your name in the room (default: none)")
    s.add_argument(
        "--language", type=_language, metavar="LANG",
        help="spoken language, a code or a name (default: the server's; detected once)",
    )  # fmt: skip
    s.add_argument(
        "--task", choices=("transcribe", "translate"),
        help="translate: to English (default: the server's)",
    )  # fmt: skip
    s.add_argument("--prompt", metavar="TEXT", help="the stream's prompt (default: the server's)")
    s.add_argument(
        "--vocabulary", metavar="TERMS",
        help='words the model should know, comma-separated: "Kubernetes, Nguyen" (default: '
        "the server's)",
    )  # fmt: skip
    s.add_argument(
        "--speakers", choices=("auto", "off"),
        help="auto: label each caption with the voice that spoke it (default: the server's)",
    )  # fmt: skip
    o = p.add_argument_group("sending")
    o.add_argument(
        "--show", action="store_true",
        help=f"show the latest caption on the status line (a viewer: --view-token or "
        f"${VIEW_TOKEN_ENV} if the server has one)",
    )  # fmt: skip
    o.add_argument(
        "--view-token", metavar="T",
        help=f"the server's view token, for --show (default: ${VIEW_TOKEN_ENV})",
    )  # fmt: skip
    o.add_argument(
        "--buffer", type=positive_float, default=120.0, metavar="S",
        help="audio kept while the server is away (a live source's oldest is dropped past it)",
    )  # fmt: skip
    o.add_argument(
        "--burst", type=positive_float, default=5.0, metavar="S",
        help="the server's --burst: how far ahead of real time it takes audio (catching up "
        "after an outage)",
    )  # fmt: skip
    add_raw_flags(p.add_argument_group("standard input (-)"), "--format")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        return list_sources()
    return publish(PublishCommand.from_args(args))


def list_sources() -> int:
    """`--list`: the microphones PortAudio sees and PulseAudio's monitor sources."""
    from streamcap.audio.errors import NoMicrophoneError
    from streamcap.audio.mic import list_input_devices
    from streamcap.audio.monitor import list_monitors

    try:
        mics = list_input_devices()
    except NoMicrophoneError as e:
        mics, note = [], f" ({e})"
    else:
        note = ""
    print("microphones (--mic NAME):" + ("" if mics else f" none{note}"))
    for d in mics:
        print(f"  {d}")
    monitors = list_monitors()
    print("monitors (--monitor SINK):" + ("" if monitors else " none (no PulseAudio/PipeWire?)"))
    for m in monitors:
        print(f"  {m.removesuffix('.monitor')}")
    return 0


def open_source(cmd: PublishCommand) -> Source:
    """The command's source, opened (AudioError, one line, when it cannot be)."""
    from streamcap.audio import capture
    from streamcap.audio.stream_input import is_url

    if cmd.mic is not None:
        return capture.open_mic(cmd.mic or None)
    if cmd.monitor is not None:
        return capture.open_monitor(cmd.monitor or None)
    assert cmd.source is not None
    if cmd.source == STDIN:
        return capture.open_stdin(sys.stdin.buffer, cmd.raw)
    if is_url(cmd.source):
        return capture.open_url(cmd.source)
    return capture.open_file(cmd.source)


def publish(cmd: PublishCommand) -> int:
    from streamcap.audio.capture import CaptureBuffer, capture_into
    from streamcap.core.pacing import SendPacer
    from streamcap.core.resume import ResumeBuffer
    from streamcap.server.publish_client import Publisher, PublishTarget

    source = open_source(cmd)
    target = PublishTarget(cmd.server, cmd.stream, cmd.token, cmd.fields)
    audio = CaptureBuffer(ResumeBuffer(cmd.buffer_s))
    line = StatusLine(sys.stderr, source.live, source.duration_s)
    publisher = Publisher(target, audio, pacer=SendPacer(cmd.burst_s), on_event=line.event)
    dropped = _Drops(line)
    thread = threading.Thread(
        target=capture_into, args=(source, audio, dropped), name="capture", daemon=True
    )
    where = f"{printable(target.base)} stream {cmd.stream!r}"
    line.event(f"publishing {printable(source.name)} to {where}")
    thread.start()
    try:
        code = asyncio.run(_main(cmd, publisher, target, line, source.live))
    finally:
        audio.close()
        line.done()
    thread.join(5)
    if audio.error is not None and code == 0:
        say(f"{PROG}: error: {printable(str(audio.error))}")
        return 1
    return code


async def _main(cmd: PublishCommand, publisher: Publisher, target: PublishTarget,
                line: StatusLine, live: bool) -> int:  # fmt: skip
    """The publisher, the status line and (``--show``) a viewer, until the publisher ends;
    Ctrl-C or SIGTERM ends the capture (a live source's backlog still goes out, a file stops
    where it is sent to), and the server's last captions are waited for; twice: at once."""
    from streamcap.server.publish_client import follow_captions

    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(publisher.run())
    interrupts = 0

    def interrupt() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            line.event("stopping: waiting for the last captions (Ctrl-C again: at once)")
            publisher.audio.stop(keep_unsent=live)
        else:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):  # not in the main thread: no handlers
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, interrupt)
    helpers = [asyncio.ensure_future(_refresh(publisher, line))]
    if cmd.show:
        show = follow_captions(target, cmd.view_token, lambda t: setattr(line, "caption", t))
        helpers.append(asyncio.ensure_future(show))
    try:
        await task
    except asyncio.CancelledError:
        return 130
    finally:
        for h in helpers:
            h.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
    line.update(publisher.refresh())
    return 0


async def _refresh(publisher: Publisher, line: StatusLine) -> None:
    while True:
        line.update(publisher.refresh())
        await asyncio.sleep(0.25)


class _Drops:
    """A live source's audio dropped for room: said once per overflow, with the total."""

    def __init__(self, line: StatusLine) -> None:
        self.line = line
        self.total = 0
        self._said = 0.0

    def __call__(self, samples: int) -> None:
        from streamcap.core.constants import SAMPLE_RATE

        self.total += samples
        now = time.monotonic()
        if now - self._said > 10:
            self._said = now
            self.line.event(
                f"the buffer is full (--buffer): dropping the oldest audio "
                f"({self.total / SAMPLE_RATE:.1f} s lost so far)"
            )


class StatusLine:
    """One line on a terminal, rewritten in place (state, seconds sent, how far behind live,
    or of how long a file, the latest caption); elsewhere (a log, a test) each event on its
    own line, no redraws."""

    def __init__(self, out: Any, live: bool = True, duration_s: float | None = None) -> None:
        self.out = out
        self.live = live
        self.duration_s = duration_s
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.caption = ""
        self._shown = ""

    def event(self, text: str) -> None:
        if self.tty:
            self.out.write("\r\x1b[K")
        self.out.write(f"{PROG}: {text}\n")
        self.out.flush()
        self._shown = ""

    def update(self, s: Any) -> None:
        if not self.tty:
            return
        # a live source's unsent audio is lag; a file's is only read ahead
        behind = f" · {s.behind_s:.1f} s behind" if self.live and s.behind_s >= 1 else ""
        of = f" of {self.duration_s:.0f}" if self.duration_s and not self.live else ""
        lost = f" · {s.lost_s:.1f} s lost" if s.lost_s else ""
        text = f"{s.state} · {s.sent_s:.1f}{of} s sent{behind}{lost}"
        if self.caption:
            text += f" · {printable(self.caption)}"
        width = max(20, _columns() - 1)
        text = text if len(text) <= width else text[: width - 1] + "…"
        if text != self._shown:
            self.out.write("\r\x1b[K" + text)
            self.out.flush()
            self._shown = text

    def done(self) -> None:
        if self.tty and self._shown:
            self.out.write("\n")
            self.out.flush()


def _columns() -> int:
    import shutil

    return shutil.get_terminal_size((100, 24)).columns
