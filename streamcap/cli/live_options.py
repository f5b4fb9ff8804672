"""The live pipeline's flags: ``--partial-interval``, ``--speakers``, ``--vad``,
``--no-partials`` and the hallucination guard's thresholds, and the `LiveConfig` they make.

One definition each, for every command that captions (`transcribe`, `dictate`, `serve`); the
builders named ``*_from_args`` read them at a command's edge, once, and everything below gets
the result (`LiveOptions`, `LiveConfig`, `GuardConfig`, a VAD name, a speakers mode).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from streamcap.cli.common import UsageError
from streamcap.cli.numbers import positive_float, threshold
from streamcap.core.live_config import LiveConfig, split_language
from streamcap.core.text import GuardConfig

if TYPE_CHECKING:
    from streamcap.cli.model_options import TaskOptions

#: --speakers: auto labels each final with its voice; off (the default) does not.
SPEAKERS = ("auto", "off")
SPEAKERS_OFF = "off"


@dataclass(frozen=True)
class LiveOptions:
    """A live command's pipeline (`dictate`, `transcribe --live`): what its stream is tuned by
    (the live flags with the model's language, task and prompt) and whether partials show."""

    config: LiveConfig = field(default_factory=LiveConfig)
    partials: bool = True  # --no-partials: finals only

    @classmethod
    def from_args(cls, args: argparse.Namespace, task: TaskOptions) -> LiveOptions:
        """The flags of `add_live_flags`, `add_vad_flag` and `add_guard_flags`."""
        config = live_config(
            task.language,
            task.task,
            args.partial_interval,
            task.prompt,
            guard_from_args(args),
            vad_from_args(args),
        )
        return cls(config=config, partials=not args.no_partials)


def live_config(
    language: str | None = None,
    task: str = LiveConfig.task,
    partial_interval: float | None = None,
    prompt: str = "",
    guard: GuardConfig | None = None,
    vad: str | None = None,
) -> LiveConfig:
    """The live pipeline's configuration for the flags (the one place --partial-interval, the
    prompt, the guard's thresholds and the VAD are wired, for `dictate`, `transcribe --live`,
    `serve` and `demo`); None: the `LiveConfig` default."""
    code, lock = split_language(language)
    cfg = LiveConfig(language=code, task=task, prompt=prompt, lock_language=lock)
    if partial_interval is not None:
        cfg = replace(cfg, policy=replace(cfg.policy, partial_interval_s=partial_interval))
    if guard is not None:
        cfg = replace(cfg, policy=replace(cfg.policy, guard=guard))
    if vad is not None:
        cfg = replace(cfg, segmenter=replace(cfg.segmenter, vad=vad))
    return cfg


# --------------------------------------------------------------------------- flags


def add_partial_interval(g: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """--partial-interval, for every command that runs the live pipeline."""
    default = LiveConfig().policy.partial_interval_s
    g.add_argument(
        "--partial-interval",
        type=positive_float,
        metavar="S",
        help=f"seconds of new speech between partial captions (default: {default:g})",
    )


def add_guard_flags(p: argparse.ArgumentParser) -> None:
    """The hallucination guard's thresholds (`text.GuardConfig`; openai-whisper's names), for
    `transcribe` (offline and --live), `dictate` and `serve` (`guard_from_args` reads them)."""
    d = GuardConfig()
    g = p.add_argument_group(
        "hallucination guard", "a decode is dropped (and logged with -v) when it fails these"
    )
    g.add_argument(
        "--no-speech-threshold", type=threshold, default=d.no_speech_threshold, metavar="P",
        help="drop a decode whose no-speech probability is at least this and whose average "
        f"log-probability is at most --logprob-threshold (default: {d.no_speech_threshold:g})",
    )  # fmt: skip
    g.add_argument(
        "--logprob-threshold", type=threshold, default=d.logprob_threshold, metavar="L",
        help="see --no-speech-threshold (default: %(default)g)",
    )  # fmt: skip
    g.add_argument(
        "--min-avg-logprob", type=threshold, default=d.min_avg_logprob, metavar="L",
        help="drop any decode whose average log-probability is below this (noise, music; "
        "default: %(default)g)",
    )  # fmt: skip


def guard_from_args(args: argparse.Namespace) -> GuardConfig:
    """The `GuardConfig` of `add_guard_flags`' flags (its other fields: their defaults)."""
    return replace(
        GuardConfig(),
        no_speech_threshold=args.no_speech_threshold,
        logprob_threshold=args.logprob_threshold,
        min_avg_logprob=args.min_avg_logprob,
    )


def add_speakers_flag(g: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """--speakers and --enroll, for every command that runs the live pipeline."""
    g.add_argument(
        "--speakers", choices=SPEAKERS, default=None,
        help="auto: label each final with the voice that spoke it (Speaker 1, Speaker 2, ...; "
        "one microphone, several people; transcribe: with or without --live); off (default): "
        "no labels",
    )  # fmt: skip
    g.add_argument(
        "--enroll", action="append", metavar="NAME=FILE",
        help="with --speakers auto: a recording of NAME alone (5-30 s), so that NAME's first "
        "caption carries the name instead of Speaker N (repeat for each person; default: none)",
    )  # fmt: skip


def speakers_from_args(args: argparse.Namespace) -> str:
    """The --speakers mode (not given: off)."""
    return str(args.speakers or SPEAKERS_OFF)


def enrolments_from_args(args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    """--enroll's (name, file) pairs, checked: names as a room's publishers' are (the server's
    rules: `server.client_text.parse_speaker`), distinct, none an automatic label ("Speaker
    2"), and only with --speakers auto."""
    from streamcap.core.speakers import SpeakerConfig
    from streamcap.server.client_text import parse_speaker
    from streamcap.server.close import ProtocolError

    given = tuple(args.enroll or ())
    if given and speakers_from_args(args) != "auto":
        raise UsageError("--enroll names voices of --speakers auto: add --speakers auto")
    out: list[tuple[str, str]] = []
    for item in given:
        raw, sep, path = item.partition("=")
        if not sep or not raw.strip() or not path:
            raise UsageError(f"--enroll {item!r}: use NAME=FILE (e.g. --enroll Mary=mary.wav)")
        try:
            name = parse_speaker(raw)
        except ProtocolError as e:
            raise UsageError(f"--enroll: {e.reason}") from None
        if re.fullmatch(r"Speaker \d+", name):
            raise UsageError(f"--enroll {name!r}: that is an automatic label; give a name")
        if name in (n for n, _ in out):
            raise UsageError(f"--enroll {name!r} given twice")
        out.append((name, path))
    most = SpeakerConfig().max_speakers - 1  # room for one voice nobody enrolled, at least
    if len(out) > most:
        raise UsageError(f"--enroll: at most {most} voices ({len(out)} given)")
    return tuple(out)


def add_vad_flag(g: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """--vad: the segmenter's voice detector (`transcribe`, `dictate`, `serve`), one of those
    registered (`streamcap.audio.vad`), the segmenter's default first."""
    from streamcap.audio.vad import describe_vad, vad_names

    default, *others = _vads(vad_names())
    rest = " or ".join(describe_vad(n) for n in others)
    g.add_argument(
        "--vad",
        choices=(default, *others),
        default=None,
        help=f"voice detector that cuts utterances: {default} (default)"
        + (f" or {rest}" if rest else ""),
    )


def _vads(names: tuple[str, ...]) -> list[str]:
    """The registered VADs, the segmenter's default first."""
    default = LiveConfig().segmenter.vad
    return [default, *(n for n in names if n != default)]


def vad_from_args(args: argparse.Namespace) -> str:
    """The --vad choice (not given: the segmenter's default). A VAD that needs a package that
    is not installed is one line at once (silero), not an error at the first stream."""
    from streamcap.audio.vad import check_vad, vad_names

    vad = str(args.vad or LiveConfig().segmenter.vad)
    if vad not in vad_names():  # argparse's choices saw to it; a name registered since went
        raise UsageError(f"--vad {vad}: not one of {', '.join(_vads(vad_names()))}")
    check_vad(vad)  # a VAD whose package is missing: one line now, not at the first stream
    return vad


def add_live_flags(g: argparse._ArgumentGroup) -> None:
    """Flags of the live pipeline's captions (`dictate`, `transcribe --live`)."""
    add_partial_interval(g)
    add_speakers_flag(g)
    g.add_argument("--no-partials", action="store_true", help="print finals only")


# --------------------------------------------------------------------------- voices


def speaker_labels(speakers: str, enrol: Sequence[tuple[str, str]] = ()) -> Any:
    """For `transcribe --speakers auto` (offline): ``path -> FileLabeller`` (a fresh meeting
    per file, one shared voice encoder, loaded now so that missing weights are one line
    before the model loads, and the ``--enroll`` voices it knows from the start), else None."""
    if speakers != "auto":
        return None
    from streamcap.runtime.file_labeller import FileLabeller
    from streamcap.runtime.labeller import SpeakerLabeller
    from streamcap.speakers.voice_encoder import shared_encoder

    encoder = shared_encoder()
    voices = enrolled_voices(enrol, encoder)
    return lambda path: FileLabeller(path, SpeakerLabeller(encoder, voices=voices))


def speaker_stage(speakers: str, clock: Any = None, enrol: Sequence[tuple[str, str]] = ()) -> Any:
    """The voice-label stage for --speakers auto (a `SpeakerLabeller` that knows the
    ``--enroll`` voices), else None. Missing weights are one line (a UserError)."""
    if speakers != "auto":
        return None
    from streamcap.runtime.labeller import SpeakerLabeller
    from streamcap.speakers.registry import default_model, encoder_for

    encoder = encoder_for(default_model())  # the one `SpeakerLabeller` takes by default
    return SpeakerLabeller(encoder, clock=clock, voices=enrolled_voices(enrol, encoder))


def enrolled_voices(enrol: Sequence[tuple[str, str]], encoder: Any) -> tuple[Any, ...]:
    """The ``--enroll`` samples read and embedded by ``encoder`` (`runtime.enrol`); a file
    that cannot name a voice is one line (`AudioError`, `EnrolmentError`)."""
    if not enrol:
        return ()
    from streamcap.runtime.enrol import embed_voices, load_sample

    return embed_voices([load_sample(name, path) for name, path in enrol], encoder)
