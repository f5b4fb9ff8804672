"""The harness's shape: scripts/*.py are thin entry points into `streamcap.evaluation`, each
still starts with its own usage, the package imports nothing heavy, `--set` parses as before.

Subprocesses, so what this test process imported already cannot hide an eager import.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from streamcap.core.live_config import LiveConfig
from streamcap.evaluation.settings import build_config, parse_value, speaker_config

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
PACKAGE = ROOT / "streamcap" / "evaluation"
#: Entry points of other packages (`streamcap bench` is the command line's).
ELSEWHERE = {"bench_decoding"}
#: Scripts without options: `--help` would run them (head_loss_check starts a Ray cluster).
NO_OPTIONS = {"head_loss_check"}


def entry_points() -> list[Path]:
    return sorted(p for p in SCRIPTS.glob("*.py") if p.stem not in ELSEWHERE)


def test_every_script_is_a_thin_entry_point_into_the_package() -> None:
    """A docstring, one import from `streamcap.evaluation.NAME` (its `main`, and the names the
    older tests load from the file), and `raise SystemExit(main())`: no logic, no `sys.path`."""
    assert len(entry_points()) >= 16
    for path in entry_points():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        doc, imp, guard = tree.body
        assert isinstance(doc, ast.Expr) and f"scripts/{path.name}" in str(ast.get_docstring(tree))
        assert isinstance(imp, ast.ImportFrom) and imp.module == f"streamcap.evaluation.{path.stem}"
        assert "main" in {a.name for a in imp.names}, path
        assert isinstance(guard, ast.If)
        assert ast.unparse(guard.body[0]) == "raise SystemExit(main())", path
        module = ast.parse((PACKAGE / f"{path.stem}.py").read_text(encoding="utf-8"))
        defined = {n.name for n in module.body if isinstance(n, ast.FunctionDef)}
        assert "main" in defined, path
    for path in [*SCRIPTS.glob("*.py"), *PACKAGE.glob("*.py")]:
        assert "sys.path" not in path.read_text(encoding="utf-8"), path


def test_every_script_still_prints_its_usage() -> None:
    """`scripts/NAME.py --help` of each script, in one interpreter: exit 0 and its usage."""
    scripts = [str(p) for p in entry_points() if p.stem not in NO_OPTIONS]
    code = f"""
import contextlib, io, json, runpy, sys
out = {{}}
for path in {scripts!r}:
    sys.argv = [path, "--help"]
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            runpy.run_path(path, run_name="__main__")
        status = "returned"
    except SystemExit as e:
        status = e.code
    out[path] = [status, buf.getvalue()]
print(json.dumps(out))
"""
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(results) == len(scripts)
    for path, (status, text) in results.items():
        assert status == 0, (path, status, text)
        assert text.startswith(f"usage: {Path(path).name} "), (path, text[:200])


def test_importing_the_harness_pulls_in_nothing_heavy() -> None:
    """`streamcap.evaluation` and its metrics load no model, plotting, alignment or Ray
    library: each module imports those where it uses them."""
    heavy = ("torch", "transformers", "matplotlib", "jiwer", "ray", "pyannote", "meeteval")
    code = (
        "import sys, streamcap.evaluation, streamcap.evaluation.metrics, "
        "streamcap.evaluation.normalize, streamcap.evaluation.output; "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, streamcap; print('streamcap.evaluation' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.stdout.strip() == "False", run.stderr


def test_set_values_parse_as_the_command_lines_always_did() -> None:
    assert parse_value("none") is None and parse_value("NULL") is None
    assert parse_value("true") is True and parse_value("False") is False
    assert parse_value("3") == 3 and isinstance(parse_value("3"), int)
    assert parse_value("0.25") == 0.25
    assert parse_value("webrtc") == "webrtc"


def test_build_config_overrides_live_policy_and_segmenter_fields() -> None:
    config = build_config(
        "en",
        ["early_finals=off", "pause_final_s=none", "policy.agreement=3", "segmenter.vad=silero"],
    )
    assert isinstance(config, LiveConfig)
    assert config.early_finals == "off"
    assert config.policy.pause_final_s is None and config.policy.agreement == 3
    assert config.segmenter.vad == "silero"
    assert config.language == "en"
    assert build_config("auto", []).language is None
    with pytest.raises(SystemExit, match="unknown setting 'no_such_field'"):
        build_config("en", ["no_such_field=1"])


def test_speaker_config_overrides() -> None:
    assert speaker_config(["match_threshold=0.8"]).match_threshold == 0.8
    with pytest.raises(SystemExit, match="unknown speaker setting"):
        speaker_config(["nope=1"])
