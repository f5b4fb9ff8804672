"""Issue 35 (red team 2026-12-05, bugs 11 and 14 and the config concerns): numeric flags,
`serve --config` and `--print-config`, through the real `streamcap` command in a subprocess.

No model is loaded: every case fails (or prints) before it would be.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clikit import run

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

LOADING = "loading model"


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any $STREAMCAP_*_TOKEN, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_TOKEN")}
    return {**env, **extra}


def toml(tmp_path: Path, text: str | bytes, name: str = "c.toml") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def one_error(
    res: subprocess.CompletedProcess[str], code: int, prefix: str = "streamcap serve: error: "
) -> str:
    """The command failed with `code` and said why in one line (argparse's usage line before
    it for a usage error), without a traceback or a model load."""
    assert res.returncode == code, (res.stdout, res.stderr)
    err = res.stderr
    assert "Traceback" not in err and LOADING not in err, err
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith(("usage:", " "))]
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    return lines[0]


# --------------------------------------------------------------------------- bug 11


@pytest.mark.parametrize(
    "args",
    [
        ["--max-frame-rate", "-5"],
        ["--max-frame-rate", "nan"],
        ["--burst", "-1"],
        ["--burst", "NaN"],
        ["--burst", "inf"],
        ["--idle-timeout", "inf"],
        ["--max-connections", "1"],
        ["--max-connections", "-3"],
        ["--partial-interval", "nan"],
        ["--no-speech-threshold", "nan"],
        ["--replica-gpus", "-1"],
    ],
)
def test_serve_refuses_negative_nan_and_infinite_numbers(args: list[str]) -> None:
    """`--max-frame-rate -5` or `--burst nan` switched the flood guards off without a word."""
    res = run("serve", *args, "--print-config", env=clean_env(), timeout=60)
    line = one_error(res, 2)
    assert f"argument {args[0]}: " in line


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("max-frame-rate = -5", "max-frame-rate"),
        ("max-frame-rate = nan", "max-frame-rate"),
        ("burst = -1.0", "burst"),
        ("burst = nan", "burst"),
        ("start-timeout = inf", "start-timeout"),
    ],
)
def test_config_refuses_negative_and_nan_guards(tmp_path: Path, text: str, key: str) -> None:
    path = toml(tmp_path, text + "\n")
    for extra in ([], ["--print-config"]):
        res = run("serve", "--config", str(path), *extra, env=clean_env(), timeout=60)
        assert one_error(res, 1).startswith(f"streamcap serve: error: {path}: {key}: ")


def test_zero_switches_a_guard_off_and_says_so() -> None:
    res = run("serve", "--max-frame-rate", "0", "--burst", "0", "--print-config", timeout=60)
    assert res.returncode == 0, res.stderr
    cfg = tomllib.loads(res.stdout)
    assert cfg["max-frame-rate"] == 0 and cfg["burst"] == 0
    helps = run("serve", "--help", timeout=60).stdout
    for flag in ("--max-frame-rate N", "--burst S"):
        text = " ".join(helps.split(f"\n  {flag}", 1)[1].split("\n  --", 1)[0].split())
        assert "(0 = no" in text, text


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from streamcap.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert isinstance(sub, argparse._SubParsersAction)
    return dict(sub.choices)


def test_every_numeric_flag_goes_through_the_one_validator() -> None:
    """The audit as a test: no command has a plain int/float flag, and each numeric flag
    refuses NaN and (but where it says what it means) infinity."""
    from streamcap.cli.numbers import Number

    plain, numeric = [], []
    for name, p in _parsers().items():
        p.format_help()  # adds the command's flags
        for a in p._actions:
            flag = f"{name} {a.option_strings[-1] if a.option_strings else a.dest}"
            if a.type in (int, float):
                plain.append(flag)
            elif isinstance(a.type, Number):
                numeric.append(flag)
                for bad in ("nan", "-nan", "NaN"):
                    with pytest.raises(argparse.ArgumentTypeError):
                        a.type(bad)
                if not a.type.infinite:
                    for bad in ("inf", "-inf", "1e999"):
                        with pytest.raises(argparse.ArgumentTypeError):
                            a.type(bad)
    assert not plain, f"numeric flags without range checks: {plain}"
    assert len(numeric) > 30, numeric
    assert "serve --max-frame-rate" in numeric and "transcribe --chunk" in numeric


# --------------------------------------------------------------------------- bug 14


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'prompt = "\xff\xfe"\n', "not valid TOML: not UTF-8"),
        ("allow-origin = " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
        ("host = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n", "nested too deeply"),
        ("max-streams = 1\nmax_streams = 2\n", "max-streams and max_streams are one key"),
    ],
)
def test_a_broken_config_is_one_line(tmp_path: Path, text: str | bytes, message: str) -> None:
    path = toml(tmp_path, text)
    for extra in ([], ["--print-config"]):
        res = run("serve", "--config", str(path), *extra, env=clean_env(), timeout=60)
        line = one_error(res, 1)
        assert line.startswith(f"streamcap serve: error: {path}: ") and message in line, line
        assert res.stdout == ""


@pytest.mark.parametrize(
    ("text", "args", "env"),
    [
        ("port = 70000\n", [], {}),
        ("port = -1\n", [], {}),
        ("", ["--port", "99999"], {}),
        ('tls-cert = "c.pem"\n', [], {}),
        ("replicas = 2\n", [], {}),
        ('publish-token = ""\n', [], {}),
        ("", ["--view-token", ""], {}),
        ("", [], {"STREAMCAP_METRICS_TOKEN": ""}),
    ],
)
def test_print_config_runs_serves_own_checks(
    tmp_path: Path, text: str, args: list[str], env: dict[str, str]
) -> None:
    """`--print-config` printed `port = 70000` with exit 0 where `serve` refuses it; an empty
    token opened that side without a word. Both now fail alike, before a model loads."""
    path = toml(tmp_path, text)
    serve = run("serve", "--config", str(path), *args, env=clean_env(**env), timeout=60)
    printed = run(
        "serve", "--config", str(path), *args, "--print-config", env=clean_env(**env), timeout=60
    )
    assert serve.returncode == printed.returncode == 2, (serve.stderr, printed.stderr)
    assert one_error(serve, 2) == one_error(printed, 2)
    assert printed.stdout == ""


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--publish-token", ""], {}, "--publish-token is empty"),
        ([], {"STREAMCAP_VIEW_TOKEN": ""}, "$STREAMCAP_VIEW_TOKEN is set but empty"),
    ],
)
def test_an_empty_token_is_refused(args: list[str], env: dict[str, str], message: str) -> None:
    res = run("serve", "--port", "0", *args, env=clean_env(**env), timeout=60)
    assert message in one_error(res, 2)


def test_print_config_keeps_environment_tokens_out(tmp_path: Path) -> None:
    """Tokens that came only from $STREAMCAP_*_TOKEN are not written (the environment is
    where the operator keeps them); a comment says where they come from. Tokens of the file
    or the command line are written: the output reads back to the same configuration."""
    env = clean_env(
        STREAMCAP_PUBLISH_TOKEN="env-pub-SECRET", STREAMCAP_VIEW_TOKEN="env-view-SECRET"
    )
    path = toml(tmp_path, 'metrics-token = "file-met"\n')
    res = run("serve", "--config", str(path), "--view-token", "cli-view", "--print-config",
              env=env, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "SECRET" not in res.stdout
    cfg = tomllib.loads(res.stdout)
    assert "publish-token" not in cfg
    assert cfg["view-token"] == "cli-view" and cfg["metrics-token"] == "file-met"
    assert "# publish-token: from $STREAMCAP_PUBLISH_TOKEN" in res.stdout
    again = run("serve", "--config", str(toml(tmp_path, res.stdout, "printed.toml")),
                "--print-config", env=env, timeout=60)  # fmt: skip
    assert again.returncode == 0 and again.stdout == res.stdout, again.stderr


def test_print_config_refuses_a_path_toml_cannot_hold(tmp_path: Path) -> None:
    """A non-UTF-8 --record path was written byte for byte: the output did not read back."""
    res = run("serve", "--record", os.fsdecode(b"rec\xff"), "--print-config", timeout=60)
    line = one_error(res, 1)
    assert "--record" in line and "not UTF-8" in line and "\\udcff" not in line, line
    assert res.stdout == ""
