"""`streamcap dictate` and `streamcap transcribe FILE --live`: the live pipeline from the terminal.

Both run the same `LiveStream` on an `InferenceWorker` as the caption server. `dictate` listens to
a microphone; `transcribe --live` replays a file, paced in real time (``--clock real``) or on the
computation-aware simulated clock (``--clock simulated``). `cli.py` wires `add_live_arguments`,
`run_dictate` and `run_transcribe_live` into its subcommands; ``python -m streamcap.cli.live
{dictate,transcribe} ...`` runs them directly.
"""

from __future__ import annotations

import argparse
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, TextIO

import numpy as np

from streamcap.audio import (
    AudioError,
    NoMicrophoneError,
    find_input_device,
    iter_audio_chunks,
)
from streamcap.core.captions import Caption
from streamcap.formats import CaptionWriter, open_writer
from streamcap.runtime.clock import RealClock, SimulatedClock
from streamcap.runtime.stream import LiveConfig, LiveStream, replay

PROG = "streamcap"
COMPUTE_DEVICES = ("auto", "cpu", "cuda")


def _add(parser: argparse.ArgumentParser, *flags: str, **kwargs: Any) -> None:
    """Add an option unless the parser already has one of its flags (cli.py may share some)."""
    if any(f in parser._option_string_actions for f in flags):
        return
    parser.add_argument(*flags, **kwargs)


def add_live_arguments(parser: argparse.ArgumentParser, *, mic: bool = False) -> None:
    """Options of the live pipeline; ``mic=True`` adds the microphone ones (`dictate`).

    Options the parser already defines (cli.py's model flags, ``-o/--output``) are left alone.
    The microphone is ``--mic``, and also ``--device`` where that flag is still free (in
    cli.py ``--device`` chooses the compute device).
    """
    _add(parser, "--model", default="base", help="Whisper model (default: base)")
    _add(parser, "--language", default=None,
         help="spoken language code (default: detect, then keep for the stream)")  # fmt: skip
    _add(parser, "--task", choices=("transcribe", "translate"), default="transcribe")
    _add(parser, "--output", "-o", action="append", default=None, metavar="FILE",
         help="also write finals to FILE (.txt, .srt, .vtt or .jsonl); repeatable")  # fmt: skip
    every = LiveConfig().policy.partial_interval_s
    _add(parser, "--partial-interval", type=float, default=None, metavar="S",
         help=f"seconds of new speech between partial captions (default: {every:g})")  # fmt: skip
    _add(parser, "--no-partials", action="store_true", help="print finals only")
    _add(parser, "--threads", type=int, default=None, help="CPU threads for the model")
    _add(parser, "--compute-device", default=None, choices=COMPUTE_DEVICES,
         help="where the model runs (default: auto)")  # fmt: skip
    if mic:
        mic_help = "microphone: index or part of its name (default: the system's)"
        _add(parser, "--mic", default=None, metavar="DEVICE", help=mic_help)
        _add(parser, "--device", "-d", dest="mic", default=None, metavar="DEVICE", help=mic_help)
        rate_help = "capture sample rate (default: the device's own; resampled to 16 kHz)"
        _add(parser, "--capture-rate", type=float, default=None, help=rate_help)
        _add(parser, "--duration", type=float, default=None, metavar="S",
             help="stop after S seconds, as Ctrl-C does")  # fmt: skip
        _add(parser, "--list-devices", action="store_true", help="list microphones and exit")
    else:
        _add(parser, "--clock", choices=("simulated", "real"), default="simulated",
             help="real: paced at real time; simulated: audio time plus the compute actually "
             "spent, never idle waiting (default)")  # fmt: skip
        _add(parser, "--chunk", type=float, default=0.1, metavar="S",
             help="seconds of audio per feed (default: 0.1)")  # fmt: skip


def add_dictate_arguments(parser: argparse.ArgumentParser) -> None:
    """`add_live_arguments` for `dictate` (cli.py's hook)."""
    add_live_arguments(parser, mic=True)


def live_config(args: argparse.Namespace) -> LiveConfig:
    cfg = LiveConfig(
        language=getattr(args, "language", None), task=getattr(args, "task", "transcribe")
    )
    interval = getattr(args, "partial_interval", None)
    if interval is not None:
        cfg = replace(cfg, policy=replace(cfg.policy, partial_interval_s=interval))
    return cfg


def _engine(args: argparse.Namespace) -> Any:
    from streamcap.runtime.engine import Engine

    device = getattr(args, "compute_device", None)
    if device is None:  # cli.py's --device is the compute device
        device = getattr(args, "device", None)
        device = device if device in COMPUTE_DEVICES else "auto"
    return Engine(
        getattr(args, "model", None) or "base",
        getattr(args, "assistant", None),
        device,
        getattr(args, "threads", None),
    )


def _mic(args: argparse.Namespace) -> str | None:
    """``--mic``, or ``--device`` unless it names a compute device (cli.py's meaning)."""
    mic = getattr(args, "mic", None)
    if mic is None:
        device = getattr(args, "device", None)
        mic = None if device is None or device in COMPUTE_DEVICES else device
    return mic


def _warm_up(engine: Any, config: LiveConfig) -> None:
    """First calls pick kernels and allocate (~1 s): pay that before audio flows."""
    from streamcap.decoding.options import DecodingOptions
    from streamcap.runtime.worker import encode_window

    clip = np.zeros(16000, dtype=np.float32)
    opts = DecodingOptions(language=config.language if engine.multilingual else None)
    engine.decode(encode_window(engine, clip, None), opts)
    if config.partial_context_margin_s is not None:
        engine.decode(encode_window(engine, clip, config.partial_context_min_s), opts)


def _check_language(engine: Any, config: LiveConfig) -> None:
    """Fail before any audio flows on a language the model does not know."""
    if config.language is not None and engine.multilingual:
        engine.spec.language_id(config.language)


def _outputs(args: argparse.Namespace) -> list[str]:
    out = getattr(args, "output", None)
    if not out:
        return []
    return [out] if isinstance(out, str) else list(out)


def _ready_engine(args: argparse.Namespace, config: LiveConfig) -> Any:
    """Load the model, check the language, warm up: ValueError on a language it lacks."""
    engine = _engine(args)
    _check_language(engine, config)
    _warm_up(engine, config)
    return engine


def _error(command: str, message: str) -> int:
    print(f"{PROG} {command}: {' '.join(str(message).split())}", file=sys.stderr)
    return 1


class _Writers:
    """The ``--output`` files (finals appended as they come)."""

    def __init__(self, paths: list[str]) -> None:
        self.writers: list[CaptionWriter] = []
        try:
            for p in paths:
                self.writers.append(open_writer(p))
        except BaseException:
            self.close()
            raise

    def write(self, cap: Caption) -> None:
        for w in self.writers:
            w.write(cap)

    def close(self) -> None:
        for w in self.writers:
            w.close()

    def __enter__(self) -> _Writers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def format_caption(cap: Caption, at: float) -> str:
    """One line for a caption event: emit time, kind, segment, audio span, text."""
    kind = "FINAL  " if cap.type == "final" else "partial"
    return f"[{at:7.2f}s] {kind} #{cap.segment:<3d} {cap.start:7.2f}-{cap.end:7.2f}  {cap.text}"


# --------------------------------------------------------------------------- transcribe --live


def run_transcribe_live(args: argparse.Namespace) -> int:
    """`streamcap transcribe FILE --live`: print partials and finals with their times."""
    path = getattr(args, "file", None) or getattr(args, "audio", None)
    if not path:
        return _error("transcribe", "no input file given")
    try:
        config = live_config(args)
        chunks = iter_audio_chunks(path, chunk_s=max(0.01, float(getattr(args, "chunk", 0.1))))
        first = next(chunks)
        writers = _Writers(_outputs(args))
    except (AudioError, ValueError, OSError) as e:
        return _error("transcribe", str(e))
    except StopIteration:
        return _error("transcribe", f"{path}: no audio")
    from streamcap.runtime.worker import InferenceWorker

    try:
        engine = _ready_engine(args, config)
    except ValueError as e:
        writers.close()
        return _error("transcribe", str(e))
    simulated = getattr(args, "clock", "simulated") != "real"
    clock = SimulatedClock() if simulated else RealClock()
    worker = InferenceWorker(engine)
    out: TextIO = sys.stdout
    show_partials = not getattr(args, "no_partials", False)
    with writers:
        stream: LiveStream

        def on_caption(cap: Caption) -> None:
            writers.write(cap)
            if cap.type == "final" or show_partials:
                print(format_caption(cap, stream.now()), file=out, flush=True)

        stream = LiveStream("file", worker, on_caption, config, clock)
        wall0 = time.perf_counter()
        try:
            replay(stream, _chain(first, chunks), chunk_s=float(getattr(args, "chunk", 0.1)))
        except KeyboardInterrupt:
            if simulated:
                return 130
            stream.finish()
            stream.wait_idle(60)
        except AudioError as e:
            return _error("transcribe", str(e))
        finally:
            if worker.threaded:
                worker.stop()
        stats = stream.stats()
        audio_s = stream.fed_s
        print(
            f"{audio_s:.1f} s of audio, {stats['compute_s']:.1f} s compute "
            f"(RTF {stats['compute_s'] / max(audio_s, 1e-9):.2f}), {stats['finals']:.0f} finals, "
            f"{stats['partials']:.0f} partials, wall {time.perf_counter() - wall0:.1f} s",
            file=sys.stderr,
        )
    if stream.errors:
        return _error("transcribe", f"decode failed: {stream.errors[0]}")
    return 0


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


# --------------------------------------------------------------------------- dictate


class _Display:
    """Finals on their own lines; the current partial updates in place (rich) on a terminal."""

    def __init__(self, show_partials: bool) -> None:
        from rich.console import Console

        self.console = Console(stderr=False, highlight=False)
        self.interactive = self.console.is_terminal and show_partials
        self.live: Any = None
        self.partial: Caption | None = None

    def __enter__(self) -> _Display:
        if self.interactive:
            from rich.live import Live

            self.live = Live(
                "", console=self.console, refresh_per_second=12, transient=True
            ).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None

    def show(self, cap: Caption) -> None:
        if cap.type == "final":
            self.partial = None
            if self.live is not None:
                self.live.update("", refresh=True)
            if cap.text.strip():
                if self.live is not None:
                    self.live.console.print(cap.text, markup=False)
                else:
                    print(cap.text, flush=True)
        elif self.live is not None:
            from rich.text import Text

            self.partial = cap
            t = Text(cap.text[: cap.committed_chars])
            t.append(cap.text[cap.committed_chars :], style="dim")
            self.live.update(t, refresh=True)


def run_dictate(args: argparse.Namespace) -> int:
    """`streamcap dictate`: live captions from the microphone until Ctrl-C (or --duration)."""
    from streamcap.audio import MicSource, list_input_devices

    try:
        if getattr(args, "list_devices", False):
            devices = list_input_devices()
            if not devices:
                raise NoMicrophoneError("no microphone found (no audio input devices)")
            for d in devices:
                print(d)
            return 0
        device = find_input_device(_mic(args))
        config = live_config(args)
        writers = _Writers(_outputs(args))
    except (AudioError, ValueError, OSError) as e:
        return _error("dictate", str(e))
    from streamcap.runtime.worker import InferenceWorker

    print(f"loading model {getattr(args, 'model', 'base')} ...", file=sys.stderr, flush=True)
    try:
        engine = _ready_engine(args, config)
    except ValueError as e:
        writers.close()
        return _error("dictate", str(e))
    worker = InferenceWorker(engine).start()
    captions: queue.Queue[Caption] = queue.Queue()
    stop = threading.Event()
    stream = LiveStream("mic", worker, captions.put, config, RealClock())
    mic = MicSource(device.index, capture_rate=getattr(args, "capture_rate", None), chunk_s=0.05)
    previous = _on_sigint(stop)
    status = 0
    try:
        with writers, _Display(not getattr(args, "no_partials", False)) as display:

            def drain() -> None:
                while True:
                    try:
                        cap = captions.get_nowait()
                    except queue.Empty:
                        return
                    writers.write(cap)
                    display.show(cap)

            try:
                mic.start()
            except AudioError as e:
                return _error("dictate", str(e))
            print(
                f"listening on {device.name} ({mic.capture_rate:g} Hz); Ctrl-C to stop",
                file=sys.stderr,
                flush=True,
            )
            limit = getattr(args, "duration", None)
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
                if limit is not None and stream.fed_s >= limit:
                    break
            mic.stop()
            for rest in _remaining(mic):
                stream.feed(rest)
            stream.finish()
            if not stream.wait_idle(60):
                status = _error("dictate", "the last caption did not come within 60 s")
            drain()
    except AudioError as e:
        status = _error("dictate", str(e))
    finally:
        signal.signal(signal.SIGINT, previous)
        mic.stop()
        worker.stop()
    if stream.errors:
        return _error("dictate", f"decode failed: {stream.errors[0]}")
    return status


def _remaining(mic: Any) -> Iterator[Any]:
    """Audio the microphone delivered before it stopped and nobody read yet."""
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
        print("\nstopping: finishing the last caption (Ctrl-C again to abort)",
              file=sys.stderr, flush=True)  # fmt: skip

    try:
        return signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave Ctrl-C alone
        return signal.getsignal(signal.SIGINT)


# --------------------------------------------------------------------------- entry point


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"{PROG}-live", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dictate", help="live captions from the microphone")
    add_live_arguments(d, mic=True)
    t = sub.add_parser("transcribe", help="a file through the live pipeline")
    t.add_argument("file")
    t.add_argument("--live", action="store_true", help="accepted for symmetry with the CLI")
    add_live_arguments(t)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "dictate":
        return run_dictate(args)
    return run_transcribe_live(args)


if __name__ == "__main__":
    sys.exit(main())
