"""`streamcap serve --config FILE.toml` and `--print-config`, through the real command.

Each test runs `python -m streamcap.cli` in a subprocess with real files; the last one starts a
real server (the bundled tiny.en model) from a config file and reads what it prints. Nothing
is mocked.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # the package's own fallback (pyproject.toml)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamcap.cli", *args],
        capture_output=True, text=True, timeout=120, cwd=cwd,
    )  # fmt: skip


def config(tmp_path: Path, text: str, name: str = "serve.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def effective(*args: str) -> dict[str, object]:
    res = run("serve", *args, "--print-config")
    assert res.returncode == 0, res.stderr
    return tomllib.loads(res.stdout)


def test_file_values_apply_and_flags_win(tmp_path: Path) -> None:
    path = config(
        tmp_path,
        'port = 9100\nmax_streams = 3\nallow-origin = ["https://obs.example"]\n'
        'admission = false\nlanguage = "English"\nrecord = "captions"\nunknown-stream = "reject"\n',
    )
    cfg = effective("--config", str(path))
    assert cfg["port"] == 9100 and cfg["max-streams"] == 3  # underscores and dashes
    assert cfg["allow-origin"] == ["https://obs.example"]
    assert cfg["admission"] is False and cfg["unknown-stream"] == "reject"
    assert cfg["language"] == "en"  # through the flag's own type, as --language English
    assert cfg["record"] == "captions"
    assert cfg["max-viewers"] == 256  # untouched keys keep the flag's default
    # the command line wins, even when it gives the flag's default value; a list flag given
    # there replaces the file's list
    cfg = effective(
        "--config", str(path), "--port", "8765", "--allow-origin", "https://b.example",
        "--max-streams", "5",
    )  # fmt: skip
    assert cfg["port"] == 8765 and cfg["max-streams"] == 5
    assert cfg["allow-origin"] == ["https://b.example"]
    assert cfg["admission"] is False  # not on the command line: the file's


def test_print_config_reads_back_to_the_same_config(tmp_path: Path) -> None:
    first = config(tmp_path, 'max-load = 0.5\nspeakers = "auto"\nallow-host = ["a.example"]\n')
    res = run(
        "serve", "--config", str(first), "--port", "9200", "--no-admission", "--view-token",
        "v1", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--print-config",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("# streamcap serve --config FILE.toml")
    printed = config(tmp_path, res.stdout, "printed.toml")
    again = run("serve", "--config", str(printed), "--print-config")
    assert again.returncode == 0, again.stderr
    assert again.stdout == res.stdout
    cfg = tomllib.loads(res.stdout)
    assert cfg["port"] == 9200 and cfg["admission"] is False and cfg["max-load"] == 0.5
    assert cfg["view-token"] == "v1" and cfg["tls-cert"] == "c.pem"
    assert cfg["speakers"] == "auto" and cfg["allow-host"] == ["a.example"]
    assert "config" not in cfg and "print-config" not in cfg and "help" not in cfg


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max-stream = 3", "unknown key 'max-stream' (did you mean 'max-streams'"),
        ("prot = 80", "unknown key 'prot' (did you mean 'prompt' or 'port'?)"),
        ("no-admission = true", "the flag --no-admission is the key admission = false"),
        ("verbose = true", "unknown key 'verbose'"),
        ("[serve]\nport = 1", "[serve]: no tables: write the keys at the top of the file"),
        ('port = "80"', "port: expects a number, got the string '80'"),
        ("port = 80.5", "port: '80.5' is not a whole number"),
        ("port = true", "port: expects a single value, got the boolean true"),
        ("host = 5", "host: expects a string, got the number 5"),
        ("max-streams = 0", "max-streams: 0 must be at least 1"),
        ('max-streams = "eight"', "max-streams: 'eight' is not a whole number"),
        ('unknown-stream = "later"', "unknown-stream: 'later' is not one of wait, reject"),
        ("admission = 1", "admission: expects true or false, got 1"),
        ("allow-origin = [1, 2]", "allow-origin: expects a string, got the number 1"),
        ("port = ", "not valid TOML: "),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = config(tmp_path, text + "\n")
    res = run("serve", "--config", str(path), "--print-config")
    assert res.returncode == 1, res.stdout
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"streamcap serve: error: {path}: "), lines[0]
    assert message in lines[0], lines[0]


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    res = run("serve", "--config", str(tmp_path / "nope.toml"))
    assert res.returncode == 1
    assert res.stderr.strip() == (
        f"streamcap serve: error: cannot read --config {tmp_path / 'nope.toml'}: "
        "No such file or directory"
    )


def test_serve_help_documents_the_keys() -> None:
    res = run("serve", "--help")
    assert res.returncode == 0
    assert "--config FILE.toml" in res.stdout and "--print-config" in res.stdout
    assert "max-streams = 8" in res.stdout and "admission = false" in res.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.model
def test_serve_runs_from_the_file(tmp_path: Path) -> None:
    """A real server started from a config file: its port, tokens and model are the file's
    (the startup lines say so, tokens hidden: stderr is no terminal), and its recording folder
    is created where the file says."""
    port = _free_port()
    path = config(
        tmp_path,
        f'port = {port}\nmodel = "tiny.en"\nview-token = "v-secret"\n'
        f'publish-token = "p-secret"\nrecord = "{tmp_path / "rec"}"\nthreads = 1\n',
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMCAP_")}
    env["STREAMCAP_CACHE"] = os.environ.get("STREAMCAP_CACHE", "") or str(
        Path.home() / ".cache" / "streamcap"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamcap.cli", "serve", "--config", str(path)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        for line in proc.stderr:
            lines.append(line)
            if "metrics" in line or proc.poll() is not None:
                break
        text = "".join(lines)
        assert "loading model tiny.en" in text, text
        assert f"streamcap serving on http://127.0.0.1:{port}/" in text, text
        # stderr is a pipe here (a log, under systemd or docker): tokens stay out of it
        assert "p-secret" not in text and "v-secret" not in text, text
        assert "token=<hidden>&view_token=<hidden>" in text, text
        assert "--show-tokens" in proc.stderr.readline()  # the line under the URLs says how
        assert "(view token required)" in text and "(publish token required)" in text
        assert (tmp_path / "rec").is_dir()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "streamcap serve: shutting down" in err
