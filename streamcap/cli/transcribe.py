"""`streamcap transcribe FILE...`: files to text and caption files, as the decoder goes.

Each final is printed and appended to the output files the moment its utterance is decoded,
so a long file shows progress in its text, and Ctrl-C leaves valid SRT / VTT / JSONL / TXT / MD
files with everything so far (openai-whisper's JSON too: rewritten from its last segment on).
Finals carry their words' times (JSONL and JSON ``words``; SRT / VTT cut long finals where the
words are, and ``--highlight-words`` underlines each as it is said), unless
``--no-word-timestamps``. Each file written is named on stderr at the end. Every check a user
can fail (flags, paths, input files, the language) runs before the model loads. ``--live``
replays one file through the live pipeline instead (`streamcap.cli.live`). ``--speakers auto``
labels each final with its voice by the live path's own labeller
(`runtime.file_labeller.FileLabeller`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamcap.cli.common import UsageError, say
from streamcap.cli.input_options import (
    add_raw_flags,
    check_stdin_once,
    input_name,
    raw_from_args,
    stdin_spooled,
)
from streamcap.cli.live import CLOCKS, DEFAULT_CHUNK_S, DEFAULT_CLOCK, ReplayOptions
from streamcap.cli.live_options import (
    SPEAKERS_OFF,
    LiveOptions,
    add_guard_flags,
    add_live_flags,
    add_vad_flag,
    enrolments_from_args,
    guard_from_args,
    speaker_labels,
    speakers_from_args,
    vad_from_args,
)
from streamcap.cli.model_options import (
    ModelOptions,
    TaskOptions,
    add_model_flags,
    decoding_options,
    load_engine,
)
from streamcap.cli.numbers import positive_float
from streamcap.cli.outputs import (
    CueOptions,
    OutputOptions,
    Writers,
    add_cue_flags,
    add_output_flags,
    cue_style_of,
    plan_outputs,
)
from streamcap.cli.whisper_flags import HELP_LINE, add_whisper_aliases
from streamcap.core.safe_text import printable
from streamcap.core.segmenter import SegmenterConfig
from streamcap.core.text import GuardConfig
from streamcap.formats.base import Decoded
from streamcap.formats.registry import file_formats, format_of

if TYPE_CHECKING:
    from streamcap.audio.stream_input import RawPcm
    from streamcap.core.captions import Caption
    from streamcap.core.decode_types import DecodeResult
    from streamcap.cues import CueStyle
    from streamcap.runtime.engine_api import InferenceEngine
    from streamcap.runtime.transcribe import TranscribeOptions

PROG = "streamcap transcribe"
#: A file at least this long gets a progress bar on a terminal.
PROGRESS_MIN_S = 5.0


@dataclass(frozen=True)
class TranscribeCommand:
    """Everything `streamcap transcribe` is asked, built once from its flags (`from_args`);
    ``replay``: with ``--live`` (the live pipeline's options), else None."""

    files: tuple[str, ...]
    outputs: OutputOptions = field(default_factory=OutputOptions)
    cues: CueOptions = field(default_factory=CueOptions)
    timestamps: bool = False
    condition_on_previous: bool = False
    word_timestamps: bool = True
    model: ModelOptions = field(default_factory=ModelOptions)
    task: TaskOptions = field(default_factory=TaskOptions)
    guard: GuardConfig = field(default_factory=GuardConfig)
    segmenter: SegmenterConfig = field(default_factory=SegmenterConfig)
    speakers: str = SPEAKERS_OFF
    enroll: tuple[tuple[str, str], ...] = ()  # --enroll NAME=FILE
    raw: RawPcm | None = None  # standard input (-) is raw PCM of this layout
    replay: ReplayOptions | None = None
    verbose: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TranscribeCommand:
        """The command's flags, checked: flags that the chosen mode would silently ignore are
        refused (UsageError)."""
        model = ModelOptions.from_args(args)
        if args.highlight_words and args.no_word_timestamps:
            raise UsageError(
                "--highlight-words needs the word timestamps (not --no-word-timestamps)"
            )
        offline_only = {
            "--condition-on-previous": args.condition_on_previous,
            "--no-word-timestamps": args.no_word_timestamps,
        }
        live_only = {
            "--clock": args.clock is not None,
            "--chunk": args.chunk is not None,
            "--partial-interval": args.partial_interval is not None,
            "--no-partials": args.no_partials,
        }
        replay = None
        task = TaskOptions.from_args(args)
        check_stdin_once(args.files)
        raw = raw_from_args(args, args.files, "--input-format")
        if args.live:
            given = [flag for flag, on in offline_only.items() if on]
            if given:
                raise UsageError(f"{', '.join(given)}: not used by --live (the live pipeline)")
            if len(args.files) > 1:
                raise UsageError(f"--live replays one file at a time ({len(args.files)} given)")
            replay = ReplayOptions(
                live=LiveOptions.from_args(args, task),
                clock=args.clock or DEFAULT_CLOCK,
                chunk_s=args.chunk or DEFAULT_CHUNK_S,
            )
        else:
            given = [flag for flag, on in live_only.items() if on]
            if given:
                raise UsageError(f"{', '.join(given)}: only with --live (the live pipeline)")
        return cls(
            files=tuple(args.files),
            outputs=OutputOptions.from_args(args),
            cues=CueOptions.from_args(args),
            timestamps=args.timestamps,
            condition_on_previous=args.condition_on_previous,
            word_timestamps=not args.no_word_timestamps,
            model=model,
            task=task,
            guard=guard_from_args(args),
            segmenter=SegmenterConfig(vad=vad_from_args(args)),
            speakers=speakers_from_args(args),
            enroll=enrolments_from_args(args),
            raw=raw,
            replay=replay,
            verbose=args.verbose,
        )


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="audio or video files (wav, flac, mp3, m4a, mp4, ...); - reads standard input "
        "(any container, or raw PCM with --rate)",
    )
    add_output_flags(p, formats=file_formats())
    add_cue_flags(p)
    add_whisper_aliases(p)
    p.epilog = HELP_LINE
    p.add_argument("--timestamps", action="store_true", help="prefix each line with its times")
    p.add_argument(
        "--condition-on-previous",
        action="store_true",
        help="prompt each utterance with the previous one's text (not with --live)",
    )
    p.add_argument(
        "--no-word-timestamps",
        action="store_true",
        help="skip timing each word (saves one decoder pass per utterance; .jsonl then has no "
        "words and long SRT/VTT finals split their time by characters; not with --live)",
    )
    add_model_flags(p)
    add_guard_flags(p)
    add_vad_flag(p)
    add_raw_flags(p.add_argument_group("standard input (-)"), "--input-format")
    g = p.add_argument_group("live pipeline (with --live)")
    g.add_argument(
        "--live",
        action="store_true",
        help="replay one file through the live pipeline: partial and final captions with the "
        "times they would appear (the flags below need it)",
    )
    add_live_flags(g)
    g.add_argument(
        "--clock",
        choices=CLOCKS,
        help="real: paced at real time; simulated: audio time plus the compute actually spent, "
        f"never idle (default: {DEFAULT_CLOCK})",
    )
    g.add_argument(
        "--chunk",
        type=positive_float,
        metavar="S",
        help=f"seconds of audio per feed (default: {DEFAULT_CHUNK_S:g})",
    )
    p.set_defaults(func=run)


def probe(path: str) -> float | None:
    """The file's duration (None if its header does not say), after checking it opens and
    decodes: AudioError (one line) for a missing, empty or undecodable file."""
    from streamcap.audio import audio_duration, iter_audio_chunks

    duration = audio_duration(path)
    if duration is None:  # no length in the header: decode the first second to vet the file
        next(iter(iter_audio_chunks(path, chunk_s=1.0)), None)
    return duration


def run(args: argparse.Namespace) -> int:
    """The command's edge: its flags become `TranscribeCommand`, which is all that goes on."""
    return transcribe(TranscribeCommand.from_args(args))


def transcribe(cmd: TranscribeCommand) -> int:
    """`-` (standard input) is copied whole to a temporary file first (`stdin_spooled`)."""
    names = [input_name(f) for f in cmd.files]
    if cmd.replay is not None:
        from streamcap.cli.live import run_transcribe_live

        with stdin_spooled(cmd.files, cmd.raw) as files:
            return run_transcribe_live(
                files[0],
                cmd.replay,
                cmd.outputs,
                cmd.cues,
                cmd.model,
                cmd.task,
                cmd.speakers,
                cmd.enroll,
                name=names[0],
            )
    plan = plan_outputs(names, cmd.outputs.outputs, cmd.outputs.formats, available=file_formats())
    style = cue_style_of(cmd.cues, plan)
    with stdin_spooled(cmd.files, cmd.raw) as files:
        return _transcribe_files(cmd, files, names, plan, style)


def _transcribe_files(
    cmd: TranscribeCommand,
    files: list[str],
    names: list[str],
    plan: list[list[Path]],
    style: CueStyle,
) -> int:
    durations = [probe(f) for f in files]
    from streamcap.runtime.transcribe import TranscribeOptions  # torch: after the checks

    # missing voice weights, an --enroll file that names no voice: one line, before the load
    speakers = speaker_labels(cmd.speakers, cmd.enroll)
    engine = load_engine(cmd.model, cmd.task)
    opts = TranscribeOptions(
        decoding=decoding_options(engine, cmd.task),
        lock_language=cmd.task.lock_language,
        condition_on_previous=cmd.condition_on_previous,
        prompt=cmd.task.prompt,
        guard=cmd.guard,
        word_timestamps=cmd.word_timestamps,
        segmenter=cmd.segmenter,
    )
    several = len(files) > 1
    for i, (path, outputs, duration) in enumerate(zip(files, plan, durations, strict=True)):
        name = names[i]
        if several:  # a header per file, as `head` prints them
            gap = "\n" if i else ""
            print(f"{gap}==> {printable(name)} <==", flush=True)
        writers = Writers(outputs, style=style, title=Path(name).name)
        status = _transcribe_one(engine, path, writers, duration, opts, cmd, speakers, name)
        if status:
            return status
    return 0


def _transcribe_one(
    engine: InferenceEngine,
    path: str,
    writers: Writers,
    duration: float | None,
    opts: TranscribeOptions,
    cmd: TranscribeCommand,
    speakers: Callable[[str], Any] | None = None,
    name: str = "",
) -> int:
    from streamcap.runtime.transcribe import Transcription

    name = name or path  # the input as given (the copy of standard input is `path`)

    count = 0
    interrupted = False
    whisper_json = any(format_of(p) == "json" for p in writers.paths)
    with writers, _progress(Path(name).name, duration) as progress, _ctrl_c() as stop:
        job = Transcription(engine, path, opts, on_progress=progress)
        labels = speakers(path) if speakers is not None else None  # one meeting per file
        try:
            for final in job:
                result = job.last_result
                decoded = (
                    _decoded(engine, final, result, job.language)
                    if whisper_json and result is not None
                    else None
                )
                for caption in labels.label(final) if labels is not None else [final]:
                    writers.write(caption, decoded)  # the files first: an interrupt keeps them
                    print(_line(caption, cmd.timestamps), flush=True)
                    count += 1
                if stop.is_set():
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            interrupted = True
        interrupted = interrupted or stop.is_set()
    if interrupted:  # the files are closed, each valid with every caption so far
        files = ", ".join(printable(str(p)) for p in writers.paths)
        kept = f"; {files} keep them" if writers.paths else ""
        say(f"\n{PROG}: interrupted after {count} caption(s) of {printable(name)}{kept}")
        return 130
    dropped = ", ".join(f"{n} {reason}" for reason, n in sorted(job.drops.items()))
    if not count:
        why = f" ({dropped} dropped by the hallucination guard)" if dropped else ""
        say(f"{PROG}: no speech found in {printable(name)}{why}")
    if cmd.verbose:
        say(f"stats: {job.stats.as_dict()}")
        if dropped:
            say(f"finals dropped: {dropped}")
    writers.say_wrote()
    return 0


def _decoded(
    engine: InferenceEngine, final: Caption, result: DecodeResult, language: str | None
) -> Decoded:
    """What openai-whisper's JSON says of `final` beyond its caption: the decode behind it."""
    english_only = "" if engine.multilingual else "en"
    return Decoded(
        text=result.text, tokens=result.tokens, avg_logprob=result.avg_logprob,
        no_speech_prob=result.no_speech_prob, language=language or result.language or english_only,
        seek=round(final.start * 100),
    )  # fmt: skip


@contextmanager
def _ctrl_c() -> Iterator[threading.Event]:
    """The first Ctrl-C asks to stop after the caption being decoded (a flag, so no library
    code between two captions can swallow it: a KeyboardInterrupt raised inside a callback
    that C code runs is only printed, and the run went on to the end); a second one
    interrupts at once. Outside the main thread (tests, embedding): no handler."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_sigint(signum: int, frame: object) -> None:
        stop.set()
        signal.signal(signal.SIGINT, previous)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _line(caption: Caption, timestamps: bool) -> str:
    text = f"{caption.speaker}: {caption.text}" if caption.speaker else caption.text
    if not timestamps:
        return text
    return f"[{_fmt_time(caption.start)} --> {_fmt_time(caption.end)}] {text}"


def _fmt_time(t: float) -> str:
    m, s = divmod(t, 60)
    h, m = divmod(int(m), 60)
    return f"{h:02d}:{m:02d}:{s:06.3f}" if h else f"{m:02d}:{s:06.3f}"


@contextmanager
def _progress(name: str, duration: float | None) -> Iterator[Any]:
    """A progress bar on stderr when it is a terminal and the file is long enough to wait
    for; yields the callback that moves it (audio seconds read)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    err = Console(stderr=True)
    show = err.is_terminal and (duration is None or duration >= PROGRESS_MIN_S)
    if not show:
        yield lambda _t: None
        return
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%" if duration else "{task.completed:.0f} s"),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        # Captions on stdout go above the bar when both are this terminal; piped, they stay
        # on stdout untouched.
        redirect_stdout=sys.stdout.isatty(),
        redirect_stderr=False,
    ) as bar:
        task = bar.add_task(name, total=duration)
        yield lambda t: bar.update(task, completed=t)
