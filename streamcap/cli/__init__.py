"""The `streamcap` command: ``transcribe | dictate | export | serve | demo | bench | models``.

One parser (`streamcap.cli.parser`), a module per command, shared flag groups each with its
frozen options dataclass (`model_options`, `live_options`, `outputs`, `cluster`) and one
engine factory (`model_options.load_engine`). A command's ``run(args)`` is its edge, as
openai-whisper's ``cli()``: it turns the parsed flags into its options once (``from_args``,
where they are checked) and passes only those on; nothing below it reads argparse's Namespace.

Errors meant for the user (`UserError`, audio that cannot be read, a model that cannot be
found) print as one line, ``streamcap COMMAND: error: ...``, like argparse's own; anything
else is a bug and keeps its traceback. ``streamcap`` with no command prints the help and exits
0.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from streamcap.cli.parser import CONFIG_COMMANDS, apply_config, build_parser, print_config
from streamcap.core.safe_text import printable

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # `streamcap` alone: what it can do, as `pip` and `docker` do
        parser.print_help()
        return 0
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from streamcap.cli.common import UsageError
    from streamcap.errors import user_message

    prog = f"{parser.prog} {args.command}"
    try:
        args = apply_config(parser, args, argv)  # --config FILE.toml under the flags
        if args.command in CONFIG_COMMANDS and args.print_config:
            print_config(args, args.check_config(args))  # after the command's own flag checks
            return 0
        return int(args.func(args) or 0)  # the command's edge: `run(args)`
    except UsageError as exc:
        command_parser: argparse.ArgumentParser = args.command_parser
        command_parser.error(str(exc))  # usage line + "streamcap X: error: ...", exit 2
        # (`parser.Parser.error` escapes what does not print, as below)
    except BrokenPipeError:  # `streamcap models | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit flush
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by it
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        message = user_message(exc)
        if message is None or args.verbose:
            raise  # a bug (or -v): the traceback is the report
        # a file name may hold ESC or a line break: escaped, so the message stays one line
        # that cannot drive the terminal
        print(f"{prog}: error: {printable(message)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
