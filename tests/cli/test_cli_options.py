"""Issue 36: the command line's options are frozen dataclasses built once at each command's edge.

Every command's options, built from its own parser with no flag given, equal the dataclasses'
defaults: the parser's default and the dataclass's come from one place (a flag whose default
is restated elsewhere, as `cli/cluster.py` once assumed ``--backend ray`` where the flag said
``local``, shows up here). And nothing below a command's edge reads argparse's Namespace: no
``getattr(args, ...)``, and a function that takes a Namespace is an edge by name. In process,
no model: the parser and the builders only.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest

CLI = Path(__file__).resolve().parents[2] / "streamcap" / "cli"


@pytest.fixture
def parse(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``streamcap ARGS`` parsed by the real parser, with no token or Ray address in the
    environment (they stand in for flags)."""
    from streamcap.cli import build_parser

    for var in (
        "STREAMCAP_PUBLISH_TOKEN",
        "STREAMCAP_VIEW_TOKEN",
        "STREAMCAP_METRICS_TOKEN",
        "RAY_ADDRESS",
    ):
        monkeypatch.delenv(var, raising=False)
    return lambda *argv: build_parser().parse_args(list(argv))


def _same_fields(built: Any, default: Any, where: str) -> None:
    """`built` equals `default`, field by field (a message that names the field)."""
    assert type(built) is type(default), where
    for f in dataclasses.fields(default):
        mine, theirs = getattr(built, f.name), getattr(default, f.name)
        if dataclasses.is_dataclass(theirs) and not isinstance(theirs, type):
            _same_fields(mine, theirs, f"{where}.{f.name}")
        elif f.compare:
            assert mine == theirs, (
                f"{where}.{f.name}: the parser gives {mine!r}, the dataclass {theirs!r}"
            )


def test_every_command_built_from_its_parsers_defaults_is_its_dataclasses_defaults(
    parse: Any,
) -> None:
    from streamcap.cli.bench import BenchCommand
    from streamcap.cli.demo import DemoCommand
    from streamcap.cli.dictate import DictateCommand
    from streamcap.cli.live import ReplayOptions
    from streamcap.cli.replicas import ReplicasCommand
    from streamcap.cli.serve_setup import ServeCommand
    from streamcap.cli.transcribe import TranscribeCommand

    cases = [
        (TranscribeCommand, ["transcribe", "a.wav"], TranscribeCommand(files=("a.wav",))),
        (DictateCommand, ["dictate"], DictateCommand()),
        (ServeCommand, ["serve"], ServeCommand()),
        (DemoCommand, ["demo"], DemoCommand()),
        (ReplicasCommand, ["replicas", "--status"], ReplicasCommand(status=True)),
        (BenchCommand, ["bench", "--manifest", "m.jsonl"], BenchCommand(manifest="m.jsonl")),
    ]
    for command, argv, default in cases:
        built = command.from_args(parse(*argv))
        _same_fields(built, default, argv[0])
        assert built == default, argv
    live = TranscribeCommand.from_args(parse("transcribe", "a.wav", "--live"))
    assert live.replay is not None
    _same_fields(live.replay, ReplayOptions(), "transcribe --live")


def test_every_group_built_from_its_parsers_defaults_is_its_dataclasses_defaults(
    parse: Any,
) -> None:
    """The shared groups one by one, in each command that has them."""
    from streamcap.cli.cluster import ClusterOptions
    from streamcap.cli.live_options import LiveOptions, guard_from_args
    from streamcap.cli.model_options import ModelOptions, TaskOptions
    from streamcap.cli.outputs import CueOptions, OutputOptions
    from streamcap.core.text import GuardConfig

    for argv in (["transcribe", "a.wav"], ["dictate"], ["serve"], ["demo"], ["replicas"]):
        args = parse(*argv)
        assert ModelOptions.from_args(args) == ModelOptions(), argv
        assert TaskOptions.from_args(args) == TaskOptions(), argv
    assert ModelOptions.from_args(parse("bench", "--manifest", "m"), precision="auto") == (
        ModelOptions()
    )
    for argv in (["transcribe", "a.wav"], ["dictate"]):
        args = parse(*argv)
        assert LiveOptions.from_args(args, TaskOptions()) == LiveOptions(), argv
        assert guard_from_args(args) == GuardConfig(), argv
    assert guard_from_args(parse("serve")) == GuardConfig()
    assert OutputOptions.from_args(parse("transcribe", "a.wav")) == OutputOptions()
    assert OutputOptions.from_args(parse("dictate"), folders=False) == OutputOptions()
    assert CueOptions.from_args(parse("transcribe", "a.wav")) == CueOptions()
    # serve's --backend defaults to local: so does the dataclass (cli/cluster.py used to
    # assume "ray" where the flag was not there)
    assert ClusterOptions.from_args(parse("serve")) == ClusterOptions()
    assert ClusterOptions().backend == "local"
    replicas = ClusterOptions.from_args(parse("replicas"))
    assert replicas == dataclasses.replace(ClusterOptions(), backend="ray")


def test_flags_reach_the_options(parse: Any) -> None:
    """A few flags of each group, given, end up where the command reads them."""
    from streamcap.cli.serve_setup import ServeCommand
    from streamcap.cli.transcribe import TranscribeCommand

    cmd = TranscribeCommand.from_args(
        parse(
            "transcribe",
            "a.wav",
            "--live",
            "--language",
            "German",
            "--partial-interval",
            "0.5",
            "--vocabulary",
            "gRPC, Nguyen",
            "--min-avg-logprob",
            "-2",
            "--clock",
            "real",
            "--model",
            "tiny.en",
            "--threads",
            "2",
            "--speakers",
            "auto",
        )
    )
    assert cmd.model.model == "tiny.en" and cmd.model.threads == 2
    assert cmd.task.language == "de" and "gRPC" in cmd.task.prompt
    assert cmd.speakers == "auto" and cmd.replay is not None and cmd.replay.clock == "real"
    live = cmd.replay.live.config
    assert live.language == "de" and live.prompt == cmd.task.prompt
    assert live.policy.partial_interval_s == 0.5 and live.policy.guard.min_avg_logprob == -2
    serve = ServeCommand.from_args(
        parse(
            "serve",
            "--backend",
            "ray",
            "--replicas",
            "2",
            "--replica-gpus",
            "0.5",
            "--max-load",
            "0.5",
            "--port",
            "9000",
            "--language",
            "auto-each",
            "--model",
            "tiny.en",
        )
    )
    assert serve.server.port == 9000 and serve.server.default_language == "auto-each"
    assert serve.capacity.max_finals_load == 0.5
    assert serve.cluster.uses_ray and serve.cluster.spec.replicas == 2
    assert serve.cluster.spec.inflight == 8  # with GPUs, unless --replica-inflight says
    replica = serve.cluster.spec_for(serve.model, serve.task).replica
    assert replica.model == "tiny.en" and replica.gpus == 0.5
    assert replica.language is None  # auto-each: detected per utterance, not warmed up as one


def test_vad_choices_come_from_the_registry(parse: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A VAD registered in `streamcap.audio.vad` is a --vad choice, with no list of names in
    the command line to update."""
    from streamcap.audio import vad as registry
    from streamcap.cli.transcribe import TranscribeCommand

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # undone after
    registry.register_vad("energy", lambda config: lambda frame, rate: True, about="loudness")
    cmd = TranscribeCommand.from_args(parse("transcribe", "a.wav", "--vad", "energy"))
    assert cmd.segmenter.vad == "energy"
    with pytest.raises(SystemExit):
        parse("transcribe", "a.wav", "--vad", "nope")


def test_the_auto_each_copy_is_the_live_configs() -> None:
    """`model_options` keeps its own copy (the parser is built without numpy)."""
    from streamcap.cli import model_options
    from streamcap.core import live_config

    assert model_options.AUTO_EACH == live_config.AUTO_EACH


# --------------------------------------------------------------------------- the edge


#: Where argparse's Namespace is read: the parser and its config files, and `main`.
EDGE_MODULES = {"__init__.py", "parser.py"}


def _namespace_params(fn: ast.FunctionDef) -> list[str]:
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    return [
        a.arg for a in args if a.annotation is not None and "Namespace" in ast.unparse(a.annotation)
    ]


def test_nothing_below_a_commands_edge_reads_the_namespace() -> None:
    """A function that takes a Namespace is a command's ``run`` (its edge), a ``from_args``
    builder (``X.from_args`` or ``x_from_args``), or the parser's; and ``getattr(args, ...)``,
    a default restated where the flag is read, is nowhere."""
    below = []
    for path in sorted(CLI.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "getattr(args" not in text, path.name
        if path.name in EDGE_MODULES:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                # (an argparse.Action's ``__call__`` is the parser's own API: it gets the Namespace)
                edge = node.name in ("run", "__call__") or node.name.endswith("from_args")
                if _namespace_params(node) and not edge:  # type: ignore[arg-type]
                    below.append(f"{path.name}: {node.name}")
    assert not below, f"these take argparse's Namespace below the edge: {below}"


def test_the_edge_check_sees_a_namespace_parameter() -> None:
    """The check above is not blind: it finds the parameter in a function of that shape."""
    tree = ast.parse("import argparse\ndef f(x: int, args: argparse.Namespace) -> None: ...")
    fn = tree.body[1]
    assert isinstance(fn, ast.FunctionDef) and _namespace_params(fn) == ["args"]
    assert isinstance(argparse.Namespace(), argparse.Namespace)
