"""`serve`'s caption-sink flags: where each stream's captions go besides the viewers.

``--youtube STREAM`` and ``--zoom STREAM`` name the stream whose finals go to YouTube Live or a
Zoom meeting; the caption URL comes from the environment (``$STREAMCAP_YOUTUBE_URL_<STREAM>``,
then ``$STREAMCAP_YOUTUBE_URL``; the same for Zoom) or from the config file's ``sink`` list
(``sink = ["youtube:main=https://upload.youtube.com/closedcaption?cid=..."]``), never from the
command line: the URL is the key to the broadcast, and a command line is there for every user
of the machine to read (``ps``) and in the shell's history. ``--sink KIND:STREAM[=TARGET]`` is
the general form, for every registered kind (`streamcap.sinks.registry`); a target that is
not a secret (an OBS websocket address) may be given on it. Checked before the model loads;
a message quotes no target.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from streamcap.cli.common import UsageError
from streamcap.cli.numbers import Number
from streamcap.sinks.base import SinkSpec
from streamcap.sinks.registry import sink_kinds, sinks_from
from streamcap.sinks.zoom import DEFAULT_LANG, check_lang


def add_sink_flags(p: argparse.ArgumentParser) -> None:
    kinds = "; ".join(f"{k.name}: {k.about}" for k in sink_kinds())
    g = p.add_argument_group(
        "caption sinks",
        "A stream's captions sent elsewhere too (docs/broadcast.md). Caption URLs are secrets:\n"
        "they come from the environment or the config file, never the command line.",
    )
    g.add_argument(
        "--youtube", action="append", default=[], metavar="STREAM",
        help="post STREAM's finals to YouTube Live; the caption ingestion URL from "
        "$STREAMCAP_YOUTUBE_URL_<STREAM> or $STREAMCAP_YOUTUBE_URL (repeatable; default: none)",
    )  # fmt: skip
    g.add_argument(
        "--zoom", action="append", default=[], metavar="STREAM",
        help="post STREAM's finals into a Zoom meeting; its caption URL (API token) from "
        "$STREAMCAP_ZOOM_URL_<STREAM> or $STREAMCAP_ZOOM_URL (repeatable; default: none)",
    )  # fmt: skip
    g.add_argument(
        "--zoom-lang", default=DEFAULT_LANG, metavar="LANG",
        help=f"the captions' language as Zoom names it, e.g. de-DE (default: {DEFAULT_LANG})",
    )  # fmt: skip
    g.add_argument(
        "--obs", action="append", default=[], metavar="[STREAM=]URL",
        help="send STREAM's captions (default: main) into OBS's own stream as CEA-608 closed "
        "captions through OBS's websocket at URL, e.g. ws://127.0.0.1:4455; its password from "
        "$STREAMCAP_OBS_PASSWORD_<STREAM>, $STREAMCAP_OBS_PASSWORD or obs_password in the "
        "config file (repeatable; default: none; docs/obs.md)",
    )  # fmt: skip
    g.add_argument(
        "--obs-rows", type=Number(int, low=2, high=3), default=2,
        help="rows of each caption screen in OBS's stream (default: 2)",
    )  # fmt: skip
    g.add_argument(
        "--obs-password", default="", metavar="PASSWORD",
        help="OBS's websocket password: in the config file only (obs_password = \"...\"); "
        "refused here, where every user of this machine can read it (default: none)",
    )  # fmt: skip
    g.add_argument(
        "--sink", action="append", default=[], metavar="KIND:STREAM[=TARGET]",
        help=f"send STREAM's captions to a sink of KIND (repeatable; a secret TARGET only in "
        f"the config file's sink list, or from the environment; default: none). Kinds: {kinds}",
    )  # fmt: skip


def sinks_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> tuple[SinkSpec, ...]:
    """The sinks the flags, the config file and the environment ask for, each checked;
    UsageError (one line, no target in it) otherwise."""
    env = os.environ if environ is None else environ
    lang = args.zoom_lang
    try:
        check_lang(lang)
    except ValueError as e:
        raise UsageError(f"--zoom-lang: {e}") from None
    items = []
    for kind in ("youtube", "zoom"):
        for stream in vars(args)[kind]:
            if "=" in stream or ":" in stream:
                raise UsageError(
                    f"--{kind} takes a stream id; its URL is a secret: set "
                    f"$STREAMCAP_{kind.upper()}_URL or put it in the config file "
                    f'(sink = ["{kind}:STREAM=..."])'
                )
            items.append(f"{kind}:{stream}")
    for item in args.obs:
        # "ws://..." is the stream main's; "show=ws://..." stream show's
        stream, _, url = ("main", "", item) if "://" in item.split("=")[0] else item.partition("=")
        items.append(f"obs:{stream}={url}")
    given = list(args.sink)
    # the config file's values are the parser's defaults (`parser.apply_config`): a list that
    # is not the default came from the command line
    parser = vars(args).get("command_parser")
    from_file = parser is not None and given == list(parser.get_default("sink") or [])
    password = args.obs_password
    if password and parser is not None and password != parser.get_default("obs_password"):
        raise UsageError(
            "--obs-password: the OBS password is a secret, and the command line shows it to "
            "every user of this machine: set $STREAMCAP_OBS_PASSWORD or put obs_password in "
            "the config file"
        )
    obs = (("rows", str(args.obs_rows)), ("password", password))
    try:
        return sinks_from(
            [*items, *given], env, command_line=not from_file,
            options={"zoom": (("lang", lang),), "obs": obs},
        )  # fmt: skip
    except ValueError as e:
        raise UsageError(f"caption sink {e}") from None
