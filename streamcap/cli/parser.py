"""The one `streamcap` parser: a sub-command per module, each module's flags added on first use.

``streamcap --help`` lists the commands without importing any of them, and ``streamcap X``
imports only module X, which imports its heavy parts (torch, transformers, the server) inside
the function that runs it: help answers in a fraction of a second.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

__all__ = ["build_parser"]

PROG = "streamcap"

#: Commands that take ``--config FILE.toml`` and ``--print-config`` (`apply_config`); each
#: sets ``check_config``: its flag checks, returning the comment lines `print_config` prints.
CONFIG_COMMANDS = frozenset({"serve"})
#: Destinations that are not configuration: never keys of a config file.
_NOT_CONFIG = frozenset({"help", "config", "print_config", "verbose"})

#: (command, module in streamcap.cli, one-line help), in the order `--help` lists them.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("transcribe", "transcribe", "audio or video files to text and subtitles (--live: live)"),
    ("dictate", "dictate", "live captions from the microphone (--type: into any window)"),
    ("export", "export", "a recording of serve --record as minutes, text or subtitles"),
    ("serve", "serve", "caption server: WebSocket ingest and broadcast, browser overlay"),
    ("publish", "publish", "a microphone, what the computer plays, a file or a URL into a server"),
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


class Parser(argparse.ArgumentParser):
    """argparse's parser whose error messages cannot drive the terminal: a value quoted back
    (``unrecognized arguments: ...``, a file name) has what does not print escaped."""

    def error(self, message: str) -> NoReturn:
        from streamcap.core.safe_text import printable

        super().error(printable(message))


class CommandParser(Parser):
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
        if command in CONFIG_COMMANDS:
            add_config_flags(p, command)
        p.set_defaults(command_parser=p)

    return populate


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
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


# --------------------------------------------------------------------------- config files


def add_config_flags(p: argparse.ArgumentParser, command: str) -> None:
    g = p.add_argument_group(
        "config file",
        "Every flag above is a key, named as the flag without its dashes: max-streams = 8\n"
        '(underscores also accepted); a list flag takes a list: allow-origin = ["https://a"];\n'
        "a switch is its destination set to true or false: --no-admission is\n"
        "admission = false. Flags given on the command line win over the file.",
    )
    g.add_argument(
        "--config", metavar="FILE.toml",
        help=f"read the flags of `{PROG} {command}` from this TOML file (default: none)",
    )  # fmt: skip
    g.add_argument(
        "--print-config", action="store_true",
        help="print the effective configuration (file and flags) as TOML and exit; it reads "
        "back with --config",
    )  # fmt: skip


def config_actions(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The actions a config file may set, by destination: every shown flag except help,
    --config itself and -v (hidden aliases share a shown flag's destination)."""
    out: dict[str, argparse.Action] = {}
    for action in p._actions:
        if (
            action.option_strings
            and action.dest not in _NOT_CONFIG
            and action.help is not argparse.SUPPRESS
        ):
            out.setdefault(action.dest, action)
    return out


def apply_config(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str] | None
) -> argparse.Namespace:
    """`args` with the ``--config`` file underneath the command line: the file's values become
    the command's defaults and the command line is parsed again, so argparse's own rule makes
    a flag given there win (a list flag given there replaces the file's list). `UserError`
    (one line) for a file that cannot be read, an unknown key or a value of the wrong type."""
    if args.command not in CONFIG_COMMANDS or not args.config:
        return args
    command_parser: argparse.ArgumentParser = args.command_parser
    values = read_config(args.config, config_actions(command_parser))
    flags = vars(args)
    for dest, value in list(values.items()):
        given = flags.get(dest)
        if isinstance(value, list) and given and given != command_parser.get_default(dest):
            del values[dest]  # `--allow-origin X` on the command line: the file's list goes
    builtin = {dest: command_parser.get_default(dest) for dest in values}
    command_parser.set_defaults(**values, flag_defaults=builtin)
    return parser.parse_args(argv)


def flag_default(args: argparse.Namespace, dest: str) -> Any:
    """The default a flag has without a config file: a check of which flags were given
    (``--replicas`` needs ``--backend ray``) must see a file's ``replicas = 2`` as given, and
    the file's values are the parser's defaults."""
    builtin: dict[str, Any] = vars(args).get("flag_defaults") or {}
    if dest in builtin:
        return builtin[dest]
    return args.command_parser.get_default(dest)


def read_config(path: str, actions: dict[str, argparse.Action]) -> dict[str, Any]:
    """The file's keys as destinations and checked values (each through its flag's own type
    and choices)."""
    import sys

    from streamcap.errors import UserError

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise UserError(f"cannot read --config {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: not valid TOML: {e}") from None
    except UnicodeDecodeError as e:  # tomllib decodes the whole file first: not its error
        raise UserError(
            f"{path}: not valid TOML: not UTF-8 (byte 0x{e.object[e.start]:02x} at offset "
            f"{e.start})"
        ) from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise UserError(
            f"{path}: not valid TOML: nested too deeply (arrays or tables inside each other)"
        ) from None
    options = {o.lstrip("-"): a for a in actions.values() for o in a.option_strings}
    values: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in data.items():
        dest = key.replace("-", "_")
        if dest in spelled:  # max-streams and max_streams: the last one silently won
            raise UserError(f"{path}: {spelled[dest]} and {key} are one key: write it once")
        spelled[dest] = key
        action = actions.get(dest)
        if action is None and isinstance(value, dict):
            raise UserError(f"{path}: [{key}]: no tables: write the keys at the top of the file")
        if action is None:
            raise UserError(f"{path}: {_unknown_key(key, actions, options)}")
        try:
            values[dest] = _config_value(action, value)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as e:
            raise UserError(f"{path}: {dest.replace('_', '-')}: {e}") from None
    return values


def _unknown_key(key: str, actions: dict[str, argparse.Action], options: dict[str, Any]) -> str:
    """The message for a key that is no flag's destination, with the closest one."""
    import difflib

    flag = options.get(key) or options.get(key.replace("_", "-"))
    if flag is not None:  # a switch written as its flag: no-admission = true
        return (
            f"unknown key {key!r}: the flag --{key} is the key "
            f"{flag.dest.replace('_', '-')} = {str(not flag.default).lower()}"
        )
    names = [d.replace("_", "-") for d in actions]
    # two: a swap of letters (prot) scores below a longer name (prompt) for difflib
    close = difflib.get_close_matches(key.replace("_", "-"), names, n=2, cutoff=0.6)
    hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
    return f"unknown key {key!r}{hint}; the keys are the flags of --help without their dashes"


def _config_value(action: argparse.Action, value: Any) -> Any:
    """`value` as the flag would have set it: a switch takes true/false, a repeatable flag a
    list (or one value), any other flag one value, through the flag's type and choices; TOML's
    own types must match (a number for a number, a string for a string)."""
    if action.nargs == 0:  # store_true / store_false
        if not isinstance(value, bool):
            raise TypeError(f"expects true or false, got {_toml_kind(value)}")
        return value
    if isinstance(action, argparse._AppendAction):
        items = value if isinstance(value, list) else [value]
        return [_one_value(action, v) for v in items]
    return _one_value(action, value)


def _one_value(action: argparse.Action, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TypeError(f"expects a single value, got {_toml_kind(value)}")
    try:
        converted = action.type(str(value)) if callable(action.type) else str(value)
    except ValueError:  # a plain int or float flag (typed ones raise ArgumentTypeError)
        kind = "a whole number" if action.type is int else "a number"
        raise ValueError(f"expects {kind}, got {value!r}") from None
    numeric = isinstance(converted, (int, float)) and not isinstance(converted, bool)
    if numeric and isinstance(value, str):
        raise TypeError(f"expects a number, got the string {value!r}")
    if not numeric and not isinstance(value, str):
        raise TypeError(f"expects a string, got the number {value!r}")
    if action.choices is not None and converted not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise ValueError(f"{value!r} is not one of {choices}")
    return converted


def _toml_kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return f"{value!r}"


def effective_config(args: argparse.Namespace) -> dict[str, Any]:
    """The command's configuration after the file and the flags, as TOML values: every config
    key whose value is set (unset ones, None, are left out: TOML has no null). UserError for a
    text TOML cannot hold: a path that is not UTF-8 would be written byte for byte, and the
    output would not read back."""
    out: dict[str, Any] = {}
    flags = vars(args)
    for dest in config_actions(args.command_parser):
        value = flags.get(dest)
        if value is None:
            continue
        key = dest.replace("_", "-")
        if isinstance(value, (list, tuple)):
            out[key] = [_toml_value(key, v) for v in value]
        else:
            out[key] = _toml_value(key, value)
    return out


def _toml_value(key: str, value: Any) -> Any:
    """`value` as TOML writes it (a path as its text); UserError for text TOML cannot hold
    (not UTF-8: a file name of other bytes comes from the command line as lone surrogates)."""
    from pathlib import PurePath

    from streamcap.core.safe_text import printable
    from streamcap.errors import UserError

    if isinstance(value, PurePath):
        value = str(value)
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(
            f"--{key} {printable(value)}: not UTF-8 text, which a TOML file cannot hold: rename "
            "it, or give it on the command line instead of in the config file"
        ) from None
    return value


def print_config(args: argparse.Namespace, notes: Sequence[str] = ()) -> None:
    """``--print-config``: the effective configuration as TOML on stdout, after `notes`
    (comment lines: what the command reads from elsewhere, such as its environment)."""
    import tomli_w

    text = tomli_w.dumps(effective_config(args))
    print(f"# {PROG} {args.command} --config FILE.toml: flags given on the command line win")
    for note in notes:
        print(note)
    print(text, end="")
