"""The model's flags and the one engine factory: ``--model``, ``--engine``, ``--assistant``,
``--device``, ``--precision``, ``--threads`` (`ModelOptions`) and ``--language``, ``--task``,
``--prompt``, ``--vocabulary`` (`TaskOptions`).

One definition each, so ``--device`` or ``--language`` mean the same in every command, and
each dataclass default is the parser's default (tests/cli/test_cli_options.py checks it).
Importing this module is cheap (the parser is built from it for ``--help``): the model, torch
and numpy are imported inside the functions that need them.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamcap.cli.common import UsageError, say
from streamcap.cli.languages import resolve_language
from streamcap.cli.numbers import positive_int
from streamcap.errors import UserError
from streamcap.models.registry import DEFAULT_MODEL
from streamcap.runtime.engines import DEFAULT_ENGINE, EngineOptions

if TYPE_CHECKING:
    from streamcap.core.decode_types import DecodingOptions
    from streamcap.runtime.engine import Engine
    from streamcap.runtime.engine_api import InferenceEngine

COMPUTE_DEVICES = ("auto", "cpu", "cuda")
DEFAULT_DEVICE = "auto"
#: ``--precision`` (the same tuple as ``streamcap.models.loader.PRECISIONS``; that module is
#: not imported here: the parser is built for ``--help`` without it).
PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
DEFAULT_PRECISION = "auto"
TASKS = ("transcribe", "translate")
DEFAULT_TASK = "transcribe"
#: ``--language auto-each`` (`core.live_config.AUTO_EACH`, not imported here: it brings numpy).
AUTO_EACH = "auto-each"


@dataclass(frozen=True)
class ModelOptions:
    """Which model runs on which engine, with which draft model, where and at which precision;
    built once from the flags by `from_args`, which checks the names."""

    model: str = DEFAULT_MODEL
    assistant: str | None = None
    device: str = DEFAULT_DEVICE
    precision: str = DEFAULT_PRECISION
    threads: int | None = None  # torch's choice
    engine: str = DEFAULT_ENGINE  # a name of `runtime.engines`

    @property
    def engine_options(self) -> EngineOptions:
        """What the engine's factory is given (`runtime.engines.make_engine`)."""
        return EngineOptions(self.model, self.assistant, self.device, self.threads, self.precision)

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, precision: str | None = None) -> ModelOptions:
        """The model group's flags (``precision``: for `bench`, whose --precision is a list).
        A model name that cannot be one is refused here, in a fraction of a second, before
        the command imports torch (`check_model_names`)."""
        from streamcap.runtime.engines import engine_names

        if args.engine not in engine_names():  # argparse's choices saw to it; a name
            # registered since went
            raise UsageError(f"--engine {args.engine}: not one of {', '.join(engine_names())}")
        options = cls(
            model=args.model or DEFAULT_MODEL,
            assistant=args.assistant or None,
            device=args.device,
            precision=args.precision if precision is None else precision,
            threads=args.threads,
            engine=args.engine,
        )
        check_model_names(options.model, options.assistant)
        return options


@dataclass(frozen=True)
class TaskOptions:
    """What the model is asked to do with the speech: its language (a code; None: detected
    once and kept; `AUTO_EACH`: detected in every utterance), the task, and the prompt text of
    --prompt and --vocabulary (`core.prompting`)."""

    language: str | None = None
    task: str = DEFAULT_TASK
    prompt: str = ""

    @property
    def decode_language(self) -> str | None:
        """The language a decode is given: None for `AUTO_EACH` (detected per utterance)."""
        return None if self.language == AUTO_EACH else self.language

    @property
    def lock_language(self) -> bool:
        """Whether a detected language is kept for the stream's (the file's) later decodes."""
        return self.language != AUTO_EACH

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TaskOptions:
        """The flags of ``add_model_flags(language=True)``; UsageError for a prompt or a
        vocabulary that cannot be one."""
        return cls(
            language=args.language,
            task=args.task,
            prompt=prompt_text(args.prompt, args.vocabulary),
        )


def prompt_text(prompt: str | None, vocabulary: str | None) -> str:
    """The prompt text of --prompt and --vocabulary (`core.prompting`); "" when neither."""
    from streamcap.core.prompting import parse_vocabulary, stream_prompt

    try:
        return stream_prompt(prompt or "", parse_vocabulary(vocabulary or ""))
    except ValueError as e:
        raise UsageError(f"--prompt/--vocabulary: {e}") from None


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
    if value.strip().lower() == AUTO_EACH:
        return AUTO_EACH
    try:
        return resolve_language(value)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# --------------------------------------------------------------------------- the flags


def add_model_flags(
    p: argparse.ArgumentParser, *, language: bool = True, precisions: bool = False
) -> None:
    """--model, --engine, --assistant, --device, --precision, --threads and (unless the command
    reads the
    language from elsewhere, as `bench` does from its manifest) --language, --task, --prompt
    and --vocabulary.

    ``precisions``: --precision takes a comma-separated list (`bench` compares them), parsed
    into ``args.precisions``; otherwise one value, ``args.precision``."""
    from streamcap.models.registry import BUNDLED

    d = ModelOptions()
    g = p.add_argument_group("model")
    g.add_argument(
        "--model",
        default=d.model,
        help=f"bundled ({', '.join(BUNDLED)}), a Hugging Face hub id, or a local folder",
    )
    add_engine_flag(g)
    g.add_argument(
        "--assistant",
        metavar="MODEL",
        help="draft model sharing the main model's tokenizer, e.g. "
        "distil-whisper/distil-large-v3 (default: none; the previous hypothesis drafts)",
    )
    g.add_argument(
        "--device",
        default=d.device,
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
            default=[d.precision],
            type=_precision_list,
            metavar="P[,P...]",
            help=f"one or more of {','.join(PRECISIONS)}, run in turn and compared "
            f"(default: {d.precision}). {precision_help}",
        )
    else:
        g.add_argument(
            "--precision",
            default=d.precision,
            type=_precision,
            metavar="{" + ",".join(PRECISIONS) + "}",
            help=precision_help,
        )
    g.add_argument(
        "--compute-device", dest="device", type=_device, default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )  # fmt: skip
    if language:
        _add_task_flags(g)
    g.add_argument(
        "--threads",
        type=positive_int,
        metavar="N",
        help="CPU threads for torch (default: torch's choice, one per core)",
    )


def add_engine_flag(g: argparse._ArgumentGroup) -> None:
    """--engine: the inference engine that runs the model, one of those registered
    (`streamcap.runtime.engines`), the default first."""
    from streamcap.runtime.engines import describe_engine, engine_names

    default, *others = engine_names()
    rest = "; ".join(describe_engine(n) for n in others)
    g.add_argument(
        "--engine",
        choices=(default, *others),
        default=ModelOptions().engine,
        help=f"inference engine that runs the model: {describe_engine(default)}, the default"
        + (f"; or {rest}" if rest else ""),
    )


def _add_task_flags(g: argparse._ArgumentGroup) -> None:
    """--language, --task, --prompt, --vocabulary (`TaskOptions`)."""
    g.add_argument(
        "--language",
        type=_language,
        metavar="LANG",
        help="spoken language, a code or a name: en, English, de, ... (default: detected "
        f"once from the first speech and kept; {AUTO_EACH}: detected in every utterance)",
    )
    g.add_argument(
        "--task", default=TaskOptions().task, choices=TASKS, help="translate: to English"
    )
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


# --------------------------------------------------------------------------- the engine


def load_engine(model: ModelOptions, task: TaskOptions | None = None) -> InferenceEngine:
    """The one engine factory: check the device, say that the model loads, load it on the
    engine ``--engine`` names (`runtime.engines.make_engine`), and check that it can do what
    the flags ask (`task`: language, task) before any audio flows."""
    from streamcap.models.loader import Placement, choose_placement
    from streamcap.runtime.engines import make_engine

    # a device or precision that cannot be used here: PlacementError, a UserError (one line)
    placement = choose_placement(model.device, model.precision)
    assistant = model.assistant
    with_assistant = f" with assistant {assistant}" if assistant else ""
    say(
        f"loading model {model.model}{with_assistant} ({placement.device}, "
        f"{placement.precision}) ..."
    )
    try:  # an unknown or damaged model raises its own one-line errors (see streamcap.errors)
        engine = make_engine(model.engine, model.engine_options)
    except ValueError as e:
        if assistant and "tokenizer" in str(e):  # Engine's check that the assistant fits
            raise UserError(str(e)) from None
        raise
    chosen = engine.placement
    if placement.measured and isinstance(chosen, Placement):  # say what `auto` chose, and why
        say(f"precision {engine.precision} ({chosen.reason})")
    if task is not None:
        check_model_options(engine, task.language, task.task)
    return engine


def check_model_names(*names: str | None) -> None:
    """`ModelNotFoundError` (one line) for a model name that is neither bundled, a local model
    folder nor shaped like a hub id: the registry's own rule (`registry.resolve` without
    preparing anything). `ModelOptions.from_args` checks --model and --assistant with it at
    the command's edge (before torch is imported), so a typo costs no load."""
    from streamcap.models.registry import resolve

    for name in names:
        if name:
            resolve(name, prepare=False)


def transformers_engine(model: ModelOptions, what: str) -> Engine:
    """`load_engine` for a command that measures the transformers engine's own decoders
    (``what``: the command); UsageError before any load for another ``--engine``."""
    from streamcap.runtime.engine import Engine

    wrong = UsageError(f"{what} measures the {DEFAULT_ENGINE} engine, not --engine {model.engine}")
    if model.engine != DEFAULT_ENGINE:
        raise wrong
    engine = load_engine(model)
    if not isinstance(engine, Engine):  # the name registered again, for another engine
        raise wrong
    return engine


def check_model_options(engine: InferenceEngine, language: str | None, task: str | None) -> None:
    """UserError for a language or task this model cannot do (Whisper's table says nothing
    about which languages a given checkpoint knows)."""
    if not engine.multilingual:
        if task == "translate":
            raise UserError("this English-only model cannot translate: use a multilingual one")
        if language not in (None, "en"):  # said, not silently ignored
            say(f"note: this model is English-only: --language {language} is not used")
        return
    if language == AUTO_EACH:
        return
    if language is not None and f"<|{language}|>" not in engine.spec.lang_to_id:
        known = sorted(k[2:-2] for k in engine.spec.lang_to_id)
        raise UserError(
            f"this model does not know language {language!r}; it knows: {', '.join(known)}"
        )


def decoding_options(engine: InferenceEngine, task: TaskOptions) -> DecodingOptions:
    """`DecodingOptions` for the flags (English-only models decode without a language)."""
    from streamcap.runtime.engine import options_for

    return options_for(engine, task.decode_language, task.task)
