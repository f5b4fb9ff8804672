"""What every command shares: flag groups, the engine factory, the live configuration.

One definition each, so ``--device``, ``--language`` or ``--partial-interval`` mean the same in
every command. Importing this module is cheap (the parser is built from it for ``--help``):
the model, torch and numpy are imported inside the functions that need them.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from streamcap.cli.languages import resolve_language
from streamcap.errors import UserError

if TYPE_CHECKING:
    from streamcap.core.decode_types import DecodingOptions
    from streamcap.core.text import GuardConfig
    from streamcap.runtime.engine import Engine
    from streamcap.runtime.live_config import LiveConfig

COMPUTE_DEVICES = ("auto", "cpu", "cuda")
#: ``--precision`` (the same tuple as ``streamcap.models.loader.PRECISIONS``; that module is
#: not imported here: the parser is built for ``--help`` without it).
PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
TASKS = ("transcribe", "translate")


class UsageError(UserError):
    """A combination of flags that cannot work: reported with the command's usage line."""


def say(message: str) -> None:
    """A progress note on stderr (stdout carries only captions, so it can be piped)."""
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- flag types


def _device(value: str) -> str:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N``; a microphone name gets a pointer to --mic."""
    v = value.strip().lower()
    if v in COMPUTE_DEVICES or (v.startswith("cuda:") and v[5:].isdigit()):
        return v
    raise argparse.ArgumentTypeError(
        f"{value!r} is not a compute device (auto, cpu, cuda or cuda:N); "
        "the microphone of `dictate` is --mic"
    )


def _precision(value: str) -> str:
    v = value.strip().lower()
    if v in PRECISIONS:
        return v
    raise argparse.ArgumentTypeError(f"{value!r} is not a precision ({', '.join(PRECISIONS)})")


def _precision_list(value: str) -> list[str]:
    """``fp32,bf16``: the benchmark runs each in turn (duplicates dropped, order kept)."""
    names = [_precision(v) for v in value.split(",") if v.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one precision")
    return list(dict.fromkeys(names))


def _language(value: str) -> str | None:
    if value.strip().lower() == "auto-each":  # `runtime.live_config.AUTO_EACH`
        return "auto-each"
    try:
        return resolve_language(value)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return n


def positive_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"{value} must be positive")
    return x


# --------------------------------------------------------------------------- flag groups


def add_model_flags(
    p: argparse.ArgumentParser, *, language: bool = True, precisions: bool = False
) -> None:
    """--model, --assistant, --device, --precision, --threads and (unless the command reads the
    language from elsewhere, as `bench` does from its manifest) --language and --task.

    ``precisions``: --precision takes a comma-separated list (`bench` compares them), parsed
    into ``args.precisions``; otherwise one value, ``args.precision``."""
    from streamcap.models.registry import BUNDLED, DEFAULT_MODEL

    g = p.add_argument_group("model")
    g.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"bundled ({', '.join(BUNDLED)}), a Hugging Face hub id, or a local folder",
    )
    g.add_argument(
        "--assistant",
        metavar="MODEL",
        help="draft model sharing the main model's tokenizer, e.g. "
        "distil-whisper/distil-large-v3 (default: none; the previous hypothesis drafts)",
    )
    g.add_argument(
        "--device",
        default="auto",
        type=_device,
        metavar="{auto,cpu,cuda}",
        help="compute device for the model (auto: CUDA when a GPU is there)",
    )
    precision_help = (
        "auto: fp16 on CUDA; on a CPU an fp32 decoder and the encoder precision measured "
        "fastest here at the first load (cached; `streamcap models` shows it). bf16 on a CPU: "
        "bf16 encoder, fp32 decoder (emulated, slow, without native bf16). int8: CPU, int8 "
        "encoder (quantised Linear layers), fp32 decoder. fp16: CUDA only"
    )
    if precisions:
        g.add_argument(
            "--precision",
            dest="precisions",
            default=["auto"],
            type=_precision_list,
            metavar="P[,P...]",
            help=f"one or more of {','.join(PRECISIONS)}, run in turn and compared "
            f"(default: auto). {precision_help}",
        )
    else:
        g.add_argument(
            "--precision",
            default="auto",
            type=_precision,
            metavar="{" + ",".join(PRECISIONS) + "}",
            help=precision_help,
        )
    g.add_argument(
        "--compute-device", dest="device", type=_device, default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )  # fmt: skip
    if language:
        g.add_argument(
            "--language",
            type=_language,
            metavar="LANG",
            help="spoken language, a code or a name: en, English, de, ... (default: detected "
            "once from the first speech and kept; auto-each: detected in every utterance)",
        )
        g.add_argument("--task", default="transcribe", choices=TASKS, help="translate: to English")
        g.add_argument(
            "--prompt", metavar="TEXT",
            help="text given to every decode as Whisper's prompt (what came before: a topic, "
            "names, a spelling style; default: none)",
        )  # fmt: skip
        g.add_argument(
            "--vocabulary", metavar="TERMS",
            help='words the model should know, comma-separated: "Kubernetes, Nguyen, gRPC" '
            "(added to the prompt; default: none)",
        )  # fmt: skip
    g.add_argument(
        "--threads",
        type=positive_int,
        metavar="N",
        help="CPU threads for torch (default: torch's choice, one per core)",
    )


def add_partial_interval(g: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """--partial-interval, for every command that runs the live pipeline."""
    from streamcap.core.policy import PolicyConfig

    g.add_argument(
        "--partial-interval",
        type=positive_float,
        metavar="S",
        help="seconds of new speech between partial captions "
        f"(default: {PolicyConfig().partial_interval_s:g})",
    )


def _float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if x != x:
        raise argparse.ArgumentTypeError("NaN is not a threshold")
    return x


def add_guard_flags(p: argparse.ArgumentParser) -> None:
    """The hallucination guard's thresholds (`text.GuardConfig`; openai-whisper's names), for
    `transcribe` (offline and --live), `dictate` and `serve`: ``args.no_speech_threshold``,
    ``args.logprob_threshold``, ``args.min_avg_logprob`` (`guard_config` reads them)."""
    from streamcap.core.text import GuardConfig

    d = GuardConfig()
    g = p.add_argument_group(
        "hallucination guard", "a decode is dropped (and logged with -v) when it fails these"
    )
    g.add_argument(
        "--no-speech-threshold", type=_float, default=d.no_speech_threshold, metavar="P",
        help="drop a decode whose no-speech probability is at least this and whose average "
        f"log-probability is at most --logprob-threshold (default: {d.no_speech_threshold:g})",
    )  # fmt: skip
    g.add_argument(
        "--logprob-threshold", type=_float, default=d.logprob_threshold, metavar="L",
        help="see --no-speech-threshold (default: %(default)g)",
    )  # fmt: skip
    g.add_argument(
        "--min-avg-logprob", type=_float, default=d.min_avg_logprob, metavar="L",
        help="drop any decode whose average log-probability is below this (noise, music; "
        "default: %(default)g)",
    )  # fmt: skip


def guard_config(args: argparse.Namespace) -> GuardConfig:
    """The `GuardConfig` of `add_guard_flags`' flags (defaults for those a command lacks)."""
    from dataclasses import replace

    from streamcap.core.text import GuardConfig

    d = GuardConfig()
    return replace(
        d,
        no_speech_threshold=getattr(args, "no_speech_threshold", d.no_speech_threshold),
        logprob_threshold=getattr(args, "logprob_threshold", d.logprob_threshold),
        min_avg_logprob=getattr(args, "min_avg_logprob", d.min_avg_logprob),
    )


def add_speakers_flag(g: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """--speakers, for every command that runs the live pipeline."""
    g.add_argument(
        "--speakers", choices=("auto", "off"), default=None,
        help="auto: label each final with the voice that spoke it (Speaker 1, Speaker 2, ...; "
        "one microphone, several people; transcribe: with or without --live); off (default): "
        "no labels",
    )  # fmt: skip


def add_vad_flag(g: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """--vad: the segmenter's voice detector (`transcribe`, `dictate`, `serve`)."""
    g.add_argument(
        "--vad", choices=("webrtc", "silero"), default=None,
        help="voice detector that cuts utterances: webrtc (default) or silero (a small neural "
        "VAD; needs the silero extra: pip install 'streamcap[silero]')",
    )  # fmt: skip


def vad_of(args: argparse.Namespace) -> str:
    """The --vad choice; UserError at once for silero without its package."""
    vad = getattr(args, "vad", None) or "webrtc"
    if vad == "silero":
        import importlib.util

        if importlib.util.find_spec("silero_vad") is None:
            raise UserError(
                "--vad silero needs the silero-vad package: pip install 'streamcap[silero]'"
            )
    return vad


def add_live_flags(g: argparse._ArgumentGroup) -> None:
    """Flags of the live pipeline's captions (`dictate`, `transcribe --live`)."""
    add_partial_interval(g)
    add_speakers_flag(g)
    g.add_argument("--no-partials", action="store_true", help="print finals only")


def speaker_labels(args: argparse.Namespace) -> Any:
    """For `transcribe --speakers auto` (offline): ``path -> FileLabeller`` (a fresh meeting
    per file, one shared voice encoder, loaded now so that missing weights are one line
    before the model loads), else None."""
    if getattr(args, "speakers", None) != "auto":
        return None
    from streamcap.runtime.labeller import FileLabeller, SpeakerLabeller
    from streamcap.speakers.voice_encoder import shared_encoder

    encoder = shared_encoder()
    return lambda path: FileLabeller(path, SpeakerLabeller(encoder))


def speaker_stage(args: argparse.Namespace, clock: Any = None) -> Any:
    """The voice-label stage for --speakers auto (a `SpeakerLabeller`), else None. Missing
    weights are one line (`VoiceEncoderMissing`, a UserError)."""
    if getattr(args, "speakers", None) != "auto":
        return None
    from streamcap.runtime.labeller import SpeakerLabeller

    return SpeakerLabeller(clock=clock)


# --------------------------------------------------------------------------- the engine


def load_engine(args: argparse.Namespace) -> Engine:
    """The one engine factory: check the device, say that the model loads, load it, and check
    that it can do what the flags ask (language, task) before any audio flows."""
    name = getattr(args, "model", None) or "base"
    assistant = getattr(args, "assistant", None)
    from streamcap.models.loader import choose_placement
    from streamcap.runtime.engine import Engine

    device = getattr(args, "device", "auto") or "auto"
    precision = getattr(args, "precision", "auto") or "auto"
    # a device or precision that cannot be used here: PlacementError, a UserError (one line)
    placement = choose_placement(device, precision)
    with_assistant = f" with assistant {assistant}" if assistant else ""
    say(f"loading model {name}{with_assistant} ({placement.device}, {placement.precision}) ...")
    try:  # an unknown or damaged model raises its own one-line errors (see streamcap.errors)
        engine = Engine(name, assistant, device, getattr(args, "threads", None), precision)
    except ValueError as e:
        if assistant and "tokenizer" in str(e):  # Engine's check that the assistant fits
            raise UserError(str(e)) from None
        raise
    if placement.measured:  # say what `auto` chose, and why
        say(f"precision {engine.precision} ({engine.placement.reason})")
    check_model_options(engine, getattr(args, "language", None), getattr(args, "task", None))
    return engine


def check_model_names(*names: str | None) -> None:
    """`ModelNotFoundError` (one line) for a model name that is neither bundled, a local model
    folder nor shaped like a hub id: the registry's own rule (`registry.resolve` without
    preparing anything). `streamcap.cli.main` checks every command's --model and --assistant
    with it before the command runs (before torch is imported), so a typo costs no load."""
    from streamcap.models.registry import resolve

    for name in names:
        if name:
            resolve(name, prepare=False)


def check_model_options(engine: Engine, language: str | None, task: str | None) -> None:
    """UserError for a language or task this model cannot do (Whisper's table says nothing
    about which languages a given checkpoint knows)."""
    if not engine.multilingual:
        if task == "translate":
            raise UserError("this English-only model cannot translate: use a multilingual one")
        if language not in (None, "en"):  # said, not silently ignored
            say(f"note: this model is English-only: --language {language} is not used")
        return
    if language == "auto-each":
        return
    if language is not None and f"<|{language}|>" not in engine.spec.lang_to_id:
        known = sorted(k[2:-2] for k in engine.spec.lang_to_id)
        raise UserError(
            f"this model does not know language {language!r}; it knows: {', '.join(known)}"
        )


def decoding_options(engine: Engine, args: argparse.Namespace) -> DecodingOptions:
    """`DecodingOptions` for the flags (English-only models decode without a language)."""
    from streamcap.runtime.engine import options_for

    language = getattr(args, "language", None)
    language = None if language == "auto-each" else language  # detected per utterance
    return options_for(engine, language, getattr(args, "task", "transcribe"))


def prompt_of(args: argparse.Namespace) -> str:
    """The prompt text of --prompt and --vocabulary (`core.prompting`); "" when neither."""
    from streamcap.core.prompting import parse_vocabulary, stream_prompt

    try:
        terms = parse_vocabulary(getattr(args, "vocabulary", None) or "")
        return stream_prompt(getattr(args, "prompt", None) or "", terms)
    except ValueError as e:
        raise UsageError(f"--prompt/--vocabulary: {e}") from None


def live_config_of(args: argparse.Namespace) -> LiveConfig:
    """`live_config` from a live command's flags (`dictate`, `transcribe --live`)."""
    return live_config(
        args.language,
        args.task,
        args.partial_interval,
        prompt_of(args),
        guard_config(args),
        vad_of(args),
    )


def live_config(
    language: str | None = None,
    task: str = "transcribe",
    partial_interval: float | None = None,
    prompt: str = "",
    guard: GuardConfig | None = None,
    vad: str = "webrtc",
) -> LiveConfig:
    """The live pipeline's configuration for the flags (the one place --partial-interval, the
    prompt and the guard's thresholds are wired, for `dictate`, `transcribe --live` and
    `serve`)."""
    from dataclasses import replace

    from streamcap.runtime.live_config import LiveConfig, split_language

    code, lock = split_language(language)
    cfg = LiveConfig(language=code, task=task, prompt=prompt, lock_language=lock)
    if partial_interval is not None:
        cfg = replace(cfg, policy=replace(cfg.policy, partial_interval_s=partial_interval))
    if guard is not None:
        cfg = replace(cfg, policy=replace(cfg.policy, guard=guard))
    if vad != "webrtc":
        cfg = replace(cfg, segmenter=replace(cfg.segmenter, vad=vad))  # type: ignore[arg-type]
    return cfg
