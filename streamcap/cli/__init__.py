"""Command line: ``streamcap transcribe | dictate | serve | demo | models``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from streamcap.models.registry import BUNDLED, DEFAULT_MODEL


def add_model_arguments(p: argparse.ArgumentParser, *, device_flag: bool = True) -> None:
    """Flags shared by every command that runs a model.

    ``dictate`` passes ``device_flag=False``: there ``--device`` picks the microphone and the
    compute device is ``--compute-device``.
    """
    g = p.add_argument_group("model")
    g.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"bundled ({', '.join(BUNDLED)}), a Hugging Face hub id, or a local folder "
        f"(default: {DEFAULT_MODEL})",
    )
    g.add_argument(
        "--assistant",
        default=None,
        help="draft model sharing the main model's tokenizer (e.g. distil-whisper/distil-large-v3)",
    )
    if device_flag:
        g.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    g.add_argument("--language", default=None, help="language code, e.g. en (default: detect)")
    g.add_argument("--task", default="transcribe", choices=["transcribe", "translate"])
    g.add_argument("--threads", type=int, default=None, help="CPU threads for torch")


def make_engine(args: argparse.Namespace) -> Any:
    from streamcap.runtime.engine import Engine

    return Engine(args.model, args.assistant, args.device, args.threads)


def decoding_options(engine: Any, args: argparse.Namespace) -> Any:
    from streamcap.runtime.engine import options_for

    opts = options_for(engine, args.language, args.task)
    if opts.language is not None and engine.multilingual:
        engine.spec.language_id(opts.language)  # fail early on an unknown language
    return opts


def _fmt_time(t: float) -> str:
    m, s = divmod(t, 60)
    h, m = divmod(int(m), 60)
    return f"{h:02d}:{m:02d}:{s:06.3f}" if h else f"{m:02d}:{s:06.3f}"


def cmd_transcribe(args: argparse.Namespace) -> int:
    if args.live:
        from streamcap.cli.live import run_transcribe_live

        return run_transcribe_live(args)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from streamcap.audio import audio_duration, iter_audio_chunks
    from streamcap.formats import open_writer
    from streamcap.runtime.transcribe import TranscribeOptions, transcribe_file

    err = Console(stderr=True)
    for out in args.output or []:
        if os.path.splitext(out)[1].lower() not in (".srt", ".vtt", ".jsonl", ".txt"):
            raise ValueError(f"{out}: output must end in .srt, .vtt, .jsonl or .txt")
    duration = audio_duration(args.file)
    if duration is None:  # no length in the header: decode the first second to vet the file
        next(iter(iter_audio_chunks(args.file, chunk_s=1.0)), None)  # AudioError if bad
    engine = make_engine(args)
    opts = TranscribeOptions(
        decoding=decoding_options(engine, args), condition_on_previous=args.condition_on_previous
    )
    writers = [open_writer(path) for path in args.output or []]
    show = err.is_terminal and (duration or 0) > 60
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeRemainingColumn(),
        console=err,
        disable=not show,
        transient=True,
    ) as progress:
        task = progress.add_task("transcribing", total=duration or None)
        captions, stats = transcribe_file(
            engine, args.file, opts, on_progress=lambda t: progress.update(task, completed=t)
        )
    for c in captions:
        if args.timestamps:
            print(f"[{_fmt_time(c.start)} --> {_fmt_time(c.end)}] {c.text}", flush=True)
        else:
            print(c.text, flush=True)
        for w in writers:
            w.write(c)
    for w in writers:
        w.close()
    if not captions:
        print(f"streamcap: no speech found in {args.file}", file=sys.stderr)
        return 1
    if args.verbose:
        err.print(f"stats: {stats.as_dict()}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from streamcap.models.registry import cache_dir, describe, prepare_bundled

    if args.prepare:
        for name in args.prepare:
            if name not in BUNDLED:
                raise ValueError(f"unknown bundled model {name!r} ({', '.join(BUNDLED)})")
            print(f"{name}: {prepare_bundled(name)}")
    table = Table(title=f"streamcap models (cache: {cache_dir()})")
    for col in ("name", "description", "state", "path"):
        table.add_column(col)
    for row in describe():
        table.add_row(row["name"], row["description"], row["state"], row["path"])
    Console().print(table)
    print(
        "Any Hugging Face Whisper checkpoint also works: --model openai/whisper-large-v3 "
        "--assistant distil-whisper/distil-large-v3 (needs network), or a local folder."
    )
    return 0


def _optional(module: str, adder: str, runner: str) -> tuple[Callable | None, Callable | None]:
    try:
        mod = __import__(module, fromlist=[adder, runner])
    except ImportError:
        return None, None
    return getattr(mod, adder, None), getattr(mod, runner, None)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamcap",
        description="Real-time Whisper captions with exact speculative decoding.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("transcribe", help="transcribe an audio or video file")
    p.add_argument("file", help="any audio or video file (wav, flac, mp3, m4a, mp4, ...)")
    p.add_argument(
        "-o",
        "--output",
        action="append",
        metavar="FILE",
        help="also write captions to FILE (.srt, .vtt, .jsonl or .txt); repeatable",
    )
    p.add_argument("--timestamps", action="store_true", help="prefix each line with its times")
    p.add_argument(
        "--condition-on-previous",
        action="store_true",
        help="prompt each utterance with the previous one's text",
    )
    p.add_argument("--live", action="store_true", help="run the file through the live pipeline")
    add_model_arguments(p)
    live_args, _ = _optional("streamcap.cli.live", "add_live_arguments", "run_transcribe_live")
    if live_args:
        live_args(p)
    p.set_defaults(func=cmd_transcribe)

    adder, runner = _optional("streamcap.cli.live", "add_dictate_arguments", "run_dictate")
    if runner:
        p = sub.add_parser("dictate", help="live captions from the microphone")
        add_model_arguments(p, device_flag=False)
        if adder:
            adder(p)
        p.set_defaults(func=runner)

    for name, help_text in (
        ("serve", "caption server: WebSocket ingest and broadcast, browser overlay"),
        ("demo", "start the server and caption a bundled speech sample into it"),
    ):
        adder, runner = _optional("streamcap.cli.serve", f"add_{name}_arguments", f"run_{name}")
        if runner:
            p = sub.add_parser(name, help=help_text)
            add_model_arguments(p)
            if adder:
                adder(p)
            p.set_defaults(func=runner)

    p = sub.add_parser("bench", help="benchmark plain greedy vs speculative decoding")
    add_model_arguments(p)
    from streamcap.cli.bench import add_bench_arguments, run_bench

    add_bench_arguments(p, model_flags=False)
    p.set_defaults(func=run_bench)

    p = sub.add_parser("models", help="list models and where they live")
    p.add_argument("--prepare", nargs="*", metavar="NAME", help="convert bundled models now")
    p.set_defaults(func=cmd_models)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from streamcap.errors import user_error

    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - turned into one clear line below
        message = user_error(exc)
        if message is None or args.verbose:
            raise
        print(f"streamcap: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
