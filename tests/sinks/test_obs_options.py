"""`serve --obs [STREAM=]URL`, `--obs-rows`, and the OBS password: from the environment or the
config file (``obs_password``), never the command line; checked by the real parser before any
model loads.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from clikit import run

from streamcap.cli.common import UsageError
from streamcap.cli.parser import apply_config, build_parser
from streamcap.cli.sink_options import sinks_from_args
from streamcap.sinks.obs import ObsSink
from streamcap.sinks.registry import make_sink

PASSWORD = "obs-Pw-Zx81qTop"


def parsed(*argv: str) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(["serve", *argv])
    return apply_config(parser, args, ["serve", *argv])


def test_obs_url_for_the_main_stream_or_a_named_one() -> None:
    specs = sinks_from_args(
        parsed("--obs", "ws://127.0.0.1:4455", "--obs", "show=ws://10.0.0.5:4456",
               "--obs-rows", "3"),
        {"STREAMCAP_OBS_PASSWORD": PASSWORD},
    )  # fmt: skip
    assert [(s.label, s.target) for s in specs] == [
        ("obs:main", "ws://127.0.0.1:4455"),
        ("obs:show", "ws://10.0.0.5:4456"),
    ]
    sink = make_sink(specs[1])
    assert isinstance(sink, ObsSink) and sink.config.rows == 3 and sink.name == "obs:show"
    assert PASSWORD not in repr(specs)


def test_obs_and_its_password_from_the_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "serve.toml"
    cfg.write_text(f'obs = ["show=ws://127.0.0.1:4455"]\nobs_password = "{PASSWORD}"\n')
    (spec,) = sinks_from_args(parsed("--config", str(cfg)), {})
    assert spec.label == "obs:show" and spec.option("password") == PASSWORD
    assert PASSWORD not in repr(spec)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--obs", "ws://127.0.0.1:4455", "--obs-password", PASSWORD],
         "the OBS password is a secret"),
        (["--obs", "http://127.0.0.1:4455"], "not an OBS websocket address"),
        (["--obs", "main=127.0.0.1:4455"], "not an OBS websocket address"),
    ],
)  # fmt: skip
def test_refused_with_one_line(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as e:
        sinks_from_args(parsed(*argv), {})
    assert message in str(e.value) and PASSWORD not in str(e.value)


def test_the_command_refuses_a_password_on_its_command_line_before_loading_a_model() -> None:
    r = run("serve", "--obs", "ws://127.0.0.1:4455", "--obs-password", PASSWORD, timeout=60)
    assert r.returncode != 0
    assert "the OBS password is a secret" in r.stderr
    assert PASSWORD not in r.stderr and PASSWORD not in r.stdout
