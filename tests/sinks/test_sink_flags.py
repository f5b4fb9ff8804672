"""`serve --youtube STREAM`, `--zoom STREAM`, `--sink KIND:STREAM[=TARGET]`: where a stream's
caption URL may come from (the environment, the config file) and may not (the command line:
it is the key to the broadcast), checked by the real parser and the real command before any
model loads, and never printed or logged.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from clikit import run
from sinkkit import SECRET

from streamcap.cli.common import UsageError
from streamcap.cli.parser import apply_config, build_parser
from streamcap.cli.sink_options import sinks_from_args

URL = f"https://upload.youtube.com/closedcaption?cid=abc&sig={SECRET}"
ZOOM = f"https://wmcapi.zoom.us/closedcaption?id=1&signature={SECRET}Z"


def parsed(*argv: str) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(["serve", *argv])
    return apply_config(parser, args, ["serve", *argv])


def test_urls_from_the_environment_per_stream_or_for_all() -> None:
    env = {"STREAMCAP_YOUTUBE_URL": URL, "STREAMCAP_ZOOM_URL_STAND_UP_1": ZOOM}
    specs = sinks_from_args(parsed("--youtube", "main", "--zoom", "stand-up.1",
                                   "--zoom-lang", "de-DE"), env)  # fmt: skip
    assert [(s.label, s.target) for s in specs] == [
        ("youtube:main", URL),
        ("zoom:stand-up.1", ZOOM),
    ]
    assert specs[1].option("lang") == "de-DE"
    assert SECRET not in repr(specs)


def test_urls_from_the_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "serve.toml"
    cfg.write_text(f'sink = ["youtube:main={URL}", "zoom:standup={ZOOM}"]\n')
    specs = sinks_from_args(parsed("--config", str(cfg)), {})
    assert [(s.label, s.target) for s in specs] == [("youtube:main", URL), ("zoom:standup", ZOOM)]


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--sink", f"youtube:main={URL}"], {}, "the youtube target is a secret"),
        (["--youtube", f"main={URL}"], {}, "--youtube takes a stream id; its URL is a secret"),
        (["--youtube", "main"], {}, "no target: set $STREAMCAP_YOUTUBE_URL_MAIN or"),
        (["--youtube", "a", "--youtube", "b"], {"STREAMCAP_YOUTUBE_URL": URL},
         "youtube:a and youtube:b have the same target"),
        (["--youtube", "a", "--sink", "youtube:a"], {"STREAMCAP_YOUTUBE_URL": URL},
         "youtube:a is given twice"),
        (["--sink", "teams:main"], {}, "no caption sink 'teams'"),
        (["--sink", "youtube"], {}, "a sink is KIND:STREAM"),
        (["--zoom", "x"], {"STREAMCAP_ZOOM_URL": f"ftp://h/{SECRET}"}, "must be an http"),
        (["--zoom", "x", "--zoom-lang", "German"], {"STREAMCAP_ZOOM_URL": ZOOM}, "--zoom-lang"),
    ],
)  # fmt: skip
def test_refused_in_one_line_that_quotes_no_url(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(UsageError) as info:
        sinks_from_args(parsed(*argv), env)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert SECRET not in str(info.value)


def test_the_real_command_checks_before_the_model_and_prints_no_url(tmp_path: Path) -> None:
    """`serve --print-config` runs serve's checks (no model): a URL from the environment is
    noted, not written; one on the command line is refused, exit 2, quoted nowhere."""
    import os

    env = {**os.environ, "STREAMCAP_YOUTUBE_URL_MAIN": URL}
    ok = run("serve", "--youtube", "main", "--print-config", env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert 'youtube = [\n    "main",\n]' in ok.stdout or 'youtube = ["main"]' in ok.stdout
    assert "# youtube:main: its caption URL from the environment (not written here)" in ok.stdout
    bad = run("serve", "--sink", f"youtube:main={URL}", "--print-config", timeout=120)
    assert bad.returncode == 2
    assert "the youtube target is a secret" in bad.stderr
    assert SECRET not in bad.stdout + bad.stderr + ok.stdout + ok.stderr
