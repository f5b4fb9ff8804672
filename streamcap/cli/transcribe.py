"""`streamcap transcribe FILE...`: files to text and caption files, as the decoder goes.

Each final is printed and appended to the output files the moment its utterance is decoded,
so a long file shows progress in its text, and Ctrl-C leaves valid SRT / VTT / JSONL / TXT
files with everything so far (openai-whisper's JSON too: rewritten from its last segment on).
Finals carry their words' times (JSONL and JSON ``words``; SRT / VTT cut long finals where the
words are, and ``--highlight-words`` underlines each as it is said), unless
``--no-word-timestamps``. Each file written is named on stderr at the end. Every check a user
can fail (flags, paths, input files, the language) runs before the model loads. ``--live``
replays one file through the live pipeline instead (`streamcap.cli.live`). ``--speakers auto``
labels each final with its voice by the live path's own labeller (`runtime.labeller.FileLabeller`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamcap.cli.common import (
    UsageError,
    add_guard_flags,
    add_live_flags,
    add_model_flags,
    add_vad_flag,
    decoding_options,
    guard_config,
    load_engine,
    positive_float,
    prompt_of,
    say,
    speaker_labels,
    vad_of,
)
from streamcap.cli.outputs import (
    Writers,
    add_cue_flags,
    add_output_flags,
    cue_style_of,
    plan_outputs,
)
from streamcap.formats import FORMATS, Decoded, format_of

if TYPE_CHECKING:
    from streamcap.core.captions import Caption
    from streamcap.core.decode_types import DecodeResult
    from streamcap.runtime.engine import Engine
    from streamcap.runtime.transcribe import TranscribeOptions

PROG = "streamcap transcribe"
#: A file at least this long gets a progress bar on a terminal.
PROGRESS_MIN_S = 5.0
#: Flags that only the live pipeline reads (dest -> flag), refused without --live.
LIVE_ONLY = {
    "clock": "--clock",
    "chunk": "--chunk",
    "partial_interval": "--partial-interval",
    "no_partials": "--no-partials",
}
#: Flags that only offline transcription reads, refused with --live.
OFFLINE_ONLY = {
    "condition_on_previous": "--condition-on-previous",
    "no_word_timestamps": "--no-word-timestamps",
}


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="audio or video files (wav, flac, mp3, m4a, mp4, ...)",
    )
    add_output_flags(p, formats=FORMATS)
    add_cue_flags(p)
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
        choices=("simulated", "real"),
        help="real: paced at real time; simulated: audio time plus the compute actually spent, "
        "never idle (default: simulated)",
    )
    g.add_argument(
        "--chunk",
        type=positive_float,
        metavar="S",
        help="seconds of audio per feed (default: 0.1)",
    )
    p.set_defaults(func=run)


def check_flags(args: argparse.Namespace) -> None:
    """Refuse flags that the chosen mode would silently ignore."""
    if args.highlight_words and args.no_word_timestamps:
        raise UsageError("--highlight-words needs the word timestamps (not --no-word-timestamps)")
    if args.live:
        given = [flag for dest, flag in OFFLINE_ONLY.items() if getattr(args, dest, False)]
        if given:
            raise UsageError(f"{', '.join(given)}: not used by --live (the live pipeline)")
        if len(args.files) > 1:
            raise UsageError(f"--live replays one file at a time ({len(args.files)} given)")
        return
    given = [flag for dest, flag in LIVE_ONLY.items() if getattr(args, dest) not in (None, False)]
    if given:
        raise UsageError(f"{', '.join(given)}: only with --live (the live pipeline)")


def probe(path: str) -> float | None:
    """The file's duration (None if its header does not say), after checking it opens and
    decodes: AudioError (one line) for a missing, empty or undecodable file."""
    from streamcap.audio import audio_duration, iter_audio_chunks

    duration = audio_duration(path)
    if duration is None:  # no length in the header: decode the first second to vet the file
        next(iter(iter_audio_chunks(path, chunk_s=1.0)), None)
    return duration


def run(args: argparse.Namespace) -> int:
    check_flags(args)
    if args.live:
        from streamcap.cli.live import run_transcribe_live

        return run_transcribe_live(args)
    plan = plan_outputs(args.files, args.output, args.format, available=FORMATS)
    style = cue_style_of(args, plan)
    durations = [probe(f) for f in args.files]
    from streamcap.core.segmenter import SegmenterConfig
    from streamcap.runtime.transcribe import TranscribeOptions  # torch: after the checks

    speakers = speaker_labels(args)  # missing voice weights: one line, before the model loads
    engine = load_engine(args)
    opts = TranscribeOptions(
        decoding=decoding_options(engine, args),
        lock_language=getattr(args, "language", None) != "auto-each",
        condition_on_previous=args.condition_on_previous,
        prompt=prompt_of(args),
        guard=guard_config(args),
        word_timestamps=not getattr(args, "no_word_timestamps", False),
        segmenter=SegmenterConfig(vad=vad_of(args)),  # type: ignore[arg-type]
    )
    several = len(args.files) > 1
    for i, (path, outputs, duration) in enumerate(zip(args.files, plan, durations, strict=True)):
        if several:  # a header per file, as `head` prints them
            gap = "\n" if i else ""
            print(f"{gap}==> {path} <==", flush=True)
        writers = Writers(outputs, style=style)
        status = _transcribe_one(engine, path, writers, duration, opts, args, speakers)
        if status:
            return status
    return 0


def _transcribe_one(
    engine: Engine,
    path: str,
    writers: Writers,
    duration: float | None,
    opts: TranscribeOptions,
    args: argparse.Namespace,
    speakers: Callable[[str], Any] | None = None,
) -> int:
    from streamcap.runtime.transcribe import Transcription

    count = 0
    interrupted = False
    whisper_json = any(format_of(p) == "json" for p in writers.paths)
    with writers, _progress(Path(path).name, duration) as progress, _ctrl_c() as stop:
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
                    print(_line(caption, args.timestamps), flush=True)
                    count += 1
                if stop.is_set():
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            interrupted = True
        interrupted = interrupted or stop.is_set()
    if interrupted:  # the files are closed, each valid with every caption so far
        kept = f"; {', '.join(map(str, writers.paths))} keep them" if writers.paths else ""
        say(f"\n{PROG}: interrupted after {count} caption(s) of {path}{kept}")
        return 130
    dropped = ", ".join(f"{n} {reason}" for reason, n in sorted(job.drops.items()))
    if not count:
        why = f" ({dropped} dropped by the hallucination guard)" if dropped else ""
        say(f"{PROG}: no speech found in {path}{why}")
    if args.verbose:
        say(f"stats: {job.stats.as_dict()}")
        if dropped:
            say(f"finals dropped: {dropped}")
    writers.say_wrote()
    return 0


def _decoded(engine: Engine, final: Caption, result: DecodeResult, language: str | None) -> Decoded:
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
