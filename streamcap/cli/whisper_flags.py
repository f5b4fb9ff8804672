"""openai-whisper's flag spellings in `streamcap transcribe`, so that a whisper command works.

whisper writes its flags with underscores and takes its switches with a value
(``--highlight_words True``, ``--word_timestamps True``); streamcap's are dashed, and its
switches take none. Each whisper flag that streamcap has is an alias of streamcap's (hidden
from ``--help``, which names them on one line); each one it has no counterpart for (beam
search, temperature fallback, ...) is refused in one line that says why and what to use
instead. Before, all of them were "unrecognized arguments" under the top-level usage.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any

from streamcap.cli.numbers import positive_int, threshold

#: The one line `--help` gives the aliases.
HELP_LINE = (
    "openai-whisper's flags work too: --output_dir, --output_format, --max_line_width,\n"
    "--max_line_count, --max_words_per_line, --highlight_words True, --word_timestamps True,\n"
    "--initial_prompt, --condition_on_previous_text, --no_speech_threshold, --fp16 False, ..."
)

_GREEDY = "streamcap decodes greedily (the model's own greedy output, exactly: no beam search)"
_NO_FALLBACK = (
    "streamcap decodes greedily at temperature 0 without fallback; its hallucination guard is "
    "--no-speech-threshold, --logprob-threshold and --min-avg-logprob"
)
#: whisper's flags that streamcap has no counterpart for: why, and what to do instead.
REFUSED = {
    "--temperature": _NO_FALLBACK,
    "--temperature_increment_on_fallback": _NO_FALLBACK,
    "--compression_ratio_threshold": _NO_FALLBACK,
    "--best_of": _GREEDY,
    "--beam_size": _GREEDY,
    "--patience": _GREEDY,
    "--length_penalty": _GREEDY,
    "--suppress_tokens": "not supported: streamcap suppresses what the model's config says",
    "--model_dir": "streamcap keeps models in its cache folder (`streamcap models` shows it)",
    "--prepend_punctuations": "streamcap keeps punctuation with its word, as whisper's default",
    "--append_punctuations": "streamcap keeps punctuation with its word, as whisper's default",
    "--clip_timestamps": "cut the part you want first (ffmpeg -ss START -to END -i IN OUT)",
    "--hallucination_silence_threshold": (
        "not supported: the voice detector leaves silence out (--vad)"
    ),
}


def whisper_bool(value: str) -> bool:
    """whisper's ``str2bool``: True or False (also true/false, yes/no, 1/0)."""
    v = value.strip().lower()
    if v in ("true", "yes", "1"):
        return True
    if v in ("false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {value!r}")


class _Refused(argparse.Action):
    """A whisper flag streamcap has no counterpart for: a one-line error that says why."""

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: Any,
        option: str | None = None,
    ) -> None:  # fmt: skip
        flag = self.option_strings[0]
        parser.error(f"{flag} (openai-whisper's): {REFUSED[flag]}")


class _Folder(argparse._AppendAction):
    """``--output_dir DIR``: always a folder, whatever its name (``-o`` guesses by suffix)."""

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: Any,
        option: str | None = None,
    ) -> None:  # fmt: skip
        folder = str(values)
        if not folder.endswith(("/", os.sep)):
            folder += os.sep
        super().__call__(parser, ns, folder, option)


class _Switch(argparse.Action):
    """A whisper switch given with its value: sets streamcap's destination through `set`
    (returning the value to store, or None to leave it as it is; ValueError: refused, its
    message said)."""

    def __init__(
        self, option_strings: Sequence[str], dest: str,
        set: Callable[[bool], Any] = lambda on: on, **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(option_strings, dest, type=whisper_bool, metavar="BOOL", **kwargs)
        self._set = set

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: Any,
        option: str | None = None,
    ) -> None:  # fmt: skip
        try:
            value = self._set(bool(values))
        except ValueError as e:
            parser.error(f"{option} {values}: {e}")
        if value is not None:
            setattr(ns, self.dest, value)


def add_whisper_aliases(p: argparse.ArgumentParser) -> None:
    """whisper's spellings of the flags `transcribe` has, hidden (see `HELP_LINE`), and the
    refusals of those it has not."""
    hidden: dict[str, Any] = {"help": argparse.SUPPRESS, "default": argparse.SUPPRESS}
    p.add_argument("--output_dir", dest="output", action=_Folder, metavar="DIR", **hidden)
    p.add_argument("--output_format", dest="format", metavar="FORMAT", **hidden)
    for name in ("max_line_width", "max_line_count", "max_words_per_line"):
        p.add_argument(f"--{name}", dest=name, type=positive_int, metavar="N", **hidden)
    p.add_argument("--highlight_words", dest="highlight_words", action=_Switch, **hidden)
    # whisper's word timestamps are off unless asked; streamcap's are on unless refused
    p.add_argument(
        "--word_timestamps", dest="no_word_timestamps", action=_Switch,
        set=lambda on: not on, **hidden,
    )  # fmt: skip
    p.add_argument(
        "--condition_on_previous_text", dest="condition_on_previous", action=_Switch, **hidden
    )
    # --fp16 True is whisper's default (fp32 where fp16 cannot run): streamcap's own choice
    p.add_argument(
        "--fp16", dest="precision", action=_Switch,
        set=lambda on: None if on else "fp32", **hidden,
    )  # fmt: skip
    p.add_argument("--initial_prompt", dest="prompt", metavar="TEXT", **hidden)
    for name in ("no_speech_threshold", "logprob_threshold"):
        p.add_argument(f"--{name}", dest=name, type=threshold, metavar="X", **hidden)
    p.add_argument(
        "--carry_initial_prompt", dest="prompt", action=_Switch,
        set=_carry, **hidden,
    )  # fmt: skip
    for flag in REFUSED:
        p.add_argument(flag, action=_Refused, nargs="?", **hidden)


def _carry(on: bool) -> None:
    """``--carry_initial_prompt``: streamcap gives the prompt to every utterance (True) and
    cannot do otherwise (False)."""
    if not on:
        raise ValueError(
            "streamcap gives --prompt to every utterance (as --carry_initial_prompt True does)"
        )
