"""`streamcap dictate`: live captions from the microphone in the terminal.

The partial updates in place (rich) on a terminal, each final prints on its own line and is
appended to the ``-o`` files; with ``--type`` each final is also typed into the focused window
(`Typist`: xdotool on X11,
wtype or ydotool on Wayland). The first Ctrl-C stops listening and lets the utterance being
spoken get its final; a second one aborts. ``--mic`` picks the microphone; ``--device`` is the
compute device, as in every command.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamcap.cli.common import say
from streamcap.cli.live_options import (
    SPEAKERS_OFF,
    LiveOptions,
    add_guard_flags,
    add_live_flags,
    add_vad_flag,
    enrolments_from_args,
    speaker_stage,
    speakers_from_args,
)
from streamcap.cli.model_options import ModelOptions, TaskOptions, add_model_flags
from streamcap.cli.numbers import Number, positive_float
from streamcap.cli.outputs import OutputOptions, Writers, add_output_flags, plan_outputs
from streamcap.core.constants import MIN_SAMPLE_RATE
from streamcap.core.safe_text import typeable
from streamcap.errors import UserError

if TYPE_CHECKING:
    from streamcap.core.captions import CaptionEvent

#: How long the last final may take after the microphone stops.
FINISH_TIMEOUT_S = 60.0


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    g = p.add_argument_group("typing")
    g.add_argument(
        "--type", action="store_true", dest="type_finals",
        help="also type each final into the focused window, as dictation tools do (X11: "
        "xdotool; Wayland: wtype or ydotool)",
    )  # fmt: skip
    g = p.add_argument_group("microphone")
    g.add_argument(
        "--mic",
        metavar="NAME",
        help="microphone: its index or part of its name, see --list-devices "
        "(default: the system's)",
    )
    g.add_argument("--list-devices", action="store_true", help="list microphones and exit")
    g.add_argument(
        "--capture-rate",
        type=Number(float, low=MIN_SAMPLE_RATE),
        metavar="HZ",
        help="capture sample rate (default: the device's own; resampled to 16 kHz)",
    )
    g.add_argument(
        "--duration",
        type=positive_float,
        metavar="S",
        help="stop after S seconds of audio, as Ctrl-C does (default: until Ctrl-C)",
    )
    add_output_flags(p, folders=False)
    add_model_flags(p)
    live = p.add_argument_group("live pipeline")
    add_live_flags(live)
    add_vad_flag(live)
    add_guard_flags(p)
    p.set_defaults(func=run)


@dataclass(frozen=True)
class DictateCommand:
    """Everything `streamcap dictate` is asked, built once from its flags (`from_args`)."""

    list_devices: bool = False
    type_finals: bool = False  # --type
    mic: str | None = None  # an index or part of a name (None: the system's)
    capture_rate: float | None = None  # None: the device's own
    duration: float | None = None  # seconds of audio (None: until Ctrl-C)
    outputs: OutputOptions = field(default_factory=OutputOptions)
    model: ModelOptions = field(default_factory=ModelOptions)
    task: TaskOptions = field(default_factory=TaskOptions)
    live: LiveOptions = field(default_factory=LiveOptions)
    speakers: str = SPEAKERS_OFF
    enroll: tuple[tuple[str, str], ...] = ()  # --enroll NAME=FILE

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DictateCommand:
        model = ModelOptions.from_args(args)
        task = TaskOptions.from_args(args)
        return cls(
            list_devices=args.list_devices,
            type_finals=args.type_finals,
            mic=args.mic,
            capture_rate=args.capture_rate,
            duration=args.duration,
            outputs=OutputOptions.from_args(args, folders=False),
            model=model,
            task=task,
            live=LiveOptions.from_args(args, task),
            speakers=speakers_from_args(args),
            enroll=enrolments_from_args(args),
        )


def run(args: argparse.Namespace) -> int:
    """The command's edge: its flags become `DictateCommand`, which is all that goes on."""
    return dictate(DictateCommand.from_args(args))


def dictate(cmd: DictateCommand) -> int:
    """Live captions from the microphone until Ctrl-C (or --duration)."""
    from streamcap.audio import (
        MicSource,
        NoMicrophoneError,
        find_input_device,
        list_input_devices,
    )

    if cmd.list_devices:
        devices = list_input_devices()
        if not devices:
            raise NoMicrophoneError("no microphone found (no audio input devices)")
        for d in devices:
            print(d)
        return 0
    typist = Typist.for_session(os.environ) if cmd.type_finals else None  # before the model
    device = find_input_device(cmd.mic)  # NoMicrophoneError before the model loads
    [outputs] = plan_outputs(["dictation"], cmd.outputs.outputs, None, folders=False)
    config = cmd.live.config

    from streamcap.cli.live import LiveLines, ready_engine
    from streamcap.core.captions import CaptionLog
    from streamcap.runtime.clock import RealClock
    from streamcap.runtime.stream import LiveStream
    from streamcap.runtime.worker import InferenceWorker

    engine = ready_engine(cmd.model, cmd.task, config)
    worker = InferenceWorker(engine).start()
    log = CaptionLog("mic")  # the sink numbers the stream's events
    captions: queue.Queue[CaptionEvent] = queue.Queue()
    stop = threading.Event()
    clock = RealClock()
    stream = LiveStream(
        "mic", worker, captions.put, config, clock, speaker_stage(cmd.speakers, clock, cmd.enroll)
    )
    mic = MicSource(device.index, capture_rate=cmd.capture_rate, chunk_s=0.05)
    previous = _on_sigint(stop)
    status = 0
    try:
        with Writers(outputs) as writers, LiveLines(cmd.live.partials) as display:

            def drain() -> None:
                while True:
                    try:
                        cap = log.add(captions.get_nowait())
                    except queue.Empty:
                        return
                    writers.write(cap)
                    display.show(cap)
                    if typist is not None and cap.type == "final":
                        typist.type(cap.text)

            mic.start()
            say(f"listening on {device.name} ({mic.capture_rate:g} Hz); Ctrl-C to stop")
            while not stop.is_set():
                try:
                    chunk = mic.read(timeout=0.1)
                except TimeoutError:
                    drain()
                    continue
                if chunk is None:  # capture ended (errors raise AudioError)
                    break
                stream.feed(chunk)
                drain()
                if cmd.duration is not None and stream.fed_s >= cmd.duration:
                    break
            mic.stop()
            for rest in _remaining(mic):
                stream.feed(rest)
            stream.finish()
            if not stream.wait_idle(FINISH_TIMEOUT_S):
                say(f"streamcap dictate: the last caption did not come in {FINISH_TIMEOUT_S:g} s")
                status = 1
            drain()
    finally:
        signal.signal(signal.SIGINT, previous)
        mic.stop()
        worker.stop()
        if typist is not None:
            typist.close()
    if stream.errors:  # a decode failed in the worker: a bug, with its own traceback
        raise stream.errors[0]
    return status


class Typist:
    """Types finals into the focused window with the desktop's own tool, on a thread of its
    own: the keystrokes of a long final take a while, and capture must not wait for them.

    X11: ``xdotool type`` (XTEST: whatever window has the keyboard focus). Wayland has no
    common input injection: ``wtype`` (virtual-keyboard protocol: wlroots compositors, e.g.
    Sway) or ``ydotool`` (uinput: any compositor, needs its ``ydotoold`` daemon). With
    ``WAYLAND_DISPLAY`` set the Wayland tools come first; xdotool there reaches only X11
    (XWayland) windows, so it is the last resort. Each final is typed followed by a space, so
    the next one continues the sentence."""

    #: (tool, command before the text, session variable it needs)
    TOOLS = {
        "xdotool": (["xdotool", "type", "--clearmodifiers", "--delay", "4", "--"], "DISPLAY"),
        "wtype": (["wtype", "--"], "WAYLAND_DISPLAY"),
        "ydotool": (["ydotool", "type", "--"], "WAYLAND_DISPLAY"),
    }

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="dictate-type", daemon=True)
        self._thread.start()

    @classmethod
    def for_session(cls, env: Mapping[str, str]) -> Typist:
        """The tool for this session; UserError (one line, before the model loads) when there
        is no graphical session, no tool for it, or the X display cannot be reached."""
        wayland, x11 = env.get("WAYLAND_DISPLAY"), env.get("DISPLAY")
        if not wayland and not x11:
            raise UserError(
                "--type types into the focused window of a desktop session, and neither "
                "DISPLAY (X11) nor WAYLAND_DISPLAY is set"
            )
        order = ["wtype", "ydotool", "xdotool"] if wayland else ["xdotool"]
        for tool in order:
            command, needs = cls.TOOLS[tool]
            if env.get(needs) and shutil.which(tool, path=env.get("PATH")):
                if tool == "xdotool":
                    cls._check_display(x11 or "")
                return cls(command)
        if wayland:
            raise UserError(
                "--type on Wayland needs wtype (Sway and other wlroots compositors) or ydotool "
                "(any compositor, with ydotoold running): sudo apt install wtype, or ydotool"
            )
        raise UserError("--type on X11 needs xdotool: sudo apt install xdotool")

    @staticmethod
    def _check_display(display: str) -> None:
        res = subprocess.run(
            ["xdotool", "getmouselocation"], capture_output=True, text=True, timeout=10,
            env={**os.environ, "DISPLAY": display},
        )  # fmt: skip
        if res.returncode != 0:  # xdotool's own words here are "Can't open display: (null)"
            raise UserError(
                f"--type cannot open the X display {display!r}: is DISPLAY the desktop's?"
            )

    def type(self, text: str) -> None:
        """Queue one final for typing (empty ones are skipped). Only what shows is typed
        (`core.safe_text.typeable`): a control character in a final would be a key press
        (ESC, BackSpace, DEL: xdotool presses them), a bidi override would reorder the rest."""
        text = typeable(text)
        if text:
            self._queue.put(text + " ")

    def close(self, timeout: float = 30.0) -> None:
        """Type what is queued, then stop."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while (text := self._queue.get()) is not None:
            try:
                res = subprocess.run(
                    [*self.command, text], capture_output=True, text=True, timeout=60
                )
                error = res.stderr.strip() if res.returncode else ""
            except (OSError, subprocess.TimeoutExpired) as e:
                error = str(e)
            if error and not self._failed:  # said once: the next finals are still tried
                self._failed = True
                say(f"streamcap dictate: typing failed ({self.command[0]}: {error})")


def _remaining(mic: Any) -> Iterator[Any]:
    """Audio the microphone delivered before it stopped and nobody read yet."""
    from streamcap.audio import AudioError

    while True:
        try:
            chunk = mic.read(timeout=0.01)
        except (TimeoutError, AudioError):
            return
        if chunk is None:
            return
        yield chunk


def _on_sigint(stop: threading.Event) -> Any:
    """First Ctrl-C: finish the utterance and exit cleanly; a second one interrupts."""

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        say("\nstopping: finishing the last caption (Ctrl-C again to abort)")

    try:
        return signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave Ctrl-C alone
        return signal.getsignal(signal.SIGINT)
