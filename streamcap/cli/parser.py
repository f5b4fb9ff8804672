"""The one `streamcap` parser: a sub-command per module, each module's flags added on first use.

``streamcap --help`` lists the commands without importing any of them, and ``streamcap X``
imports only module X, which imports its heavy parts (torch, transformers, the server) inside
the function that runs it: help answers in a fraction of a second.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from typing import Any

PROG = "streamcap"

#: (command, module in streamcap.cli, one-line help), in the order `--help` lists them.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("transcribe", "transcribe", "audio or video files to text and subtitles (--live: live)"),
    ("dictate", "dictate", "live captions from the microphone in the terminal"),
    ("serve", "serve", "caption server: WebSocket ingest and broadcast, browser overlay"),
    ("replicas", "replicas", "start, show or stop inference replicas on a Ray cluster"),
    ("demo", "demo", "start the server and caption a bundled speech sample into it"),
    ("bench", "bench", "benchmark plain greedy vs speculative decoding"),
    ("models", "models", "list the bundled models, their state and cache folder"),
)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default, unless the help already says it or there is
    nothing to say (switches, empty lists, "none"). Descriptions keep their line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or not action.option_strings
            or action.nargs == 0  # switches, --help, --version
            or default is None
            or default is argparse.SUPPRESS
            or default == []
        ):
            return text
        return f"{text} (default: %(default)s)"


class CommandParser(argparse.ArgumentParser):
    """A command's parser whose flags are added by ``populate`` the first time it is used
    (parsing or help), so commands not run cost nothing."""

    def __init__(
        self, *args: Any, populate: Callable[[argparse.ArgumentParser], None] | None = None,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self._populate = populate

    def _ready(self) -> None:
        populate, self._populate = self._populate, None
        if populate is not None:
            populate(self)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._ready()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self._ready()
        return super().format_help()

    def format_usage(self) -> str:
        self._ready()
        return super().format_usage()


class _Version(argparse.Action):
    """``--version``, looked up only when asked (importlib.metadata is not free)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"{PROG} {version()}")  # on stdout, as argparse's own version action does
        parser.exit()


def version() -> str:
    """The installed distribution's version, else the package's own, else "unknown"."""
    from importlib import metadata

    try:
        return metadata.version("streamcap")
    except metadata.PackageNotFoundError:
        import streamcap

        return str(getattr(streamcap, "__version__", "unknown"))


def _populate(command: str, module: str) -> Callable[[argparse.ArgumentParser], None]:
    def populate(p: argparse.ArgumentParser) -> None:
        mod = importlib.import_module(f"streamcap.cli.{module}")
        mod.add_arguments(p, command)
        p.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
            help="log more, and show tracebacks",
        )  # fmt: skip
        p.set_defaults(command_parser=p)

    return populate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Real-time Whisper captions with exact speculative decoding.",
        epilog=f"`{PROG} COMMAND --help` shows a command's flags.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log more, and show tracebacks"
    )
    # not required: `streamcap` alone prints this help (`main`), not a usage error
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for command, module, text in COMMANDS:
        sub.add_parser(
            command,
            help=text,
            description=text[0].upper() + text[1:] + ".",
            prog=f"{PROG} {command}",
            populate=_populate(command, module),
        )
    return parser
