"""Issue 35 (red team 2026-12-05, bug 16 and the "tokens on stderr" concern): `streamcap serve`
with an encrypted TLS key, and where its startup lines may show tokens. Real subprocesses, real
openssl keys, a real pseudo-terminal (the `pty` module) for "on a terminal"; the token tests
load the bundled base model (`model` marker).
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from clikit import ROOT

LOADING = "loading model"
PROMPT = "pass phrase"  # OpenSSL's "Enter PEM pass phrase:"


@pytest.fixture(scope="module")
def encrypted_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and its private key encrypted with a passphrase."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "enc.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-days", "1", "-subj", "/CN=localhost",
         "-keyout", str(key), "-out", str(cert), "-passout", "pass:secret"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    assert b"ENCRYPTED" in key.read_bytes()
    return cert, key


def on_terminal(
    args: list[str],
    deadline_s: float = 120.0,
    until: str = "",
    ready: Callable[[str], None] | None = None,
) -> tuple[str, int]:
    """Run `streamcap ARGS` with a pseudo-terminal as its controlling terminal (stdin, stdout
    and stderr, and /dev/tty, where OpenSSL asks for a passphrase); everything it wrote, and its
    exit status. Once `until` shows (a server's last startup line), `ready` gets the output so
    far, then the command is sent SIGINT. A command still running at `deadline_s` (waiting at a
    prompt) is killed: status -9."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "streamcap.cli", *args])
    out = b""
    end = time.monotonic() + deadline_s
    status = None
    interrupted = False
    while status is None and time.monotonic() < end:
        readable, _, _ = select.select([fd], [], [], 0.2)
        if readable:
            with contextlib.suppress(OSError):  # the child closed the terminal
                out += os.read(fd, 65536)
        if until and not interrupted and until in out.decode(errors="replace"):
            try:
                if ready is not None:
                    ready(out.decode(errors="replace"))
            finally:
                os.kill(pid, signal.SIGINT)
                interrupted = True
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(code)
    if status is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        status = -9
    while select.select([fd], [], [], 0.1)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(fd)
    return out.decode(errors="replace").replace("\r\n", "\n"), status


def test_an_encrypted_key_is_refused_without_a_terminal(encrypted_key: tuple[Path, Path]) -> None:
    """No terminal: OpenSSL printed its prompt (twice in the report) and the error said
    "Invalid argument"."""
    cert, key = encrypted_key
    res = subprocess.run(
        [sys.executable, "-m", "streamcap.cli", "serve", "--port", "0", "--tls-cert", str(cert),
         "--tls-key", str(key)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert res.returncode == 1, res.stderr
    assert PROMPT not in res.stderr + res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and LOADING not in res.stderr, res.stderr
    assert lines[0].startswith("streamcap serve: error: cannot use --tls-cert ")
    assert "the key is encrypted" in lines[0] and "openssl pkey" in lines[0], lines[0]


def test_an_encrypted_key_is_refused_on_a_terminal_without_a_prompt(
    encrypted_key: tuple[Path, Path],
) -> None:
    """On a terminal the prompt waited for a passphrase before the model loaded, and asked
    again after it (the server read the key a second time)."""
    cert, key = encrypted_key
    shown, status = on_terminal(
        ["serve", "--port", "0", "--tls-cert", str(cert), "--tls-key", str(key)], 60
    )
    assert status == 1, shown
    assert PROMPT not in shown and LOADING not in shown, shown
    assert "the key is encrypted" in shown, shown


def _serve_args(port_args: list[str]) -> list[str]:
    return ["serve", *port_args, "--threads", "1", "--publish-token", "p-SECRET",
            "--view-token", "v-SECRET", "--metrics-token", "m-SECRET"]  # fmt: skip


@pytest.mark.model
def test_tokens_show_on_a_terminal_and_a_plain_key_serves_https(
    encrypted_key: tuple[Path, Path], tmp_path: Path
) -> None:
    """On a terminal the operator sees the URLs with their tokens, as before. The server runs
    on the TLS context `serve` built (and checked) before the model loaded: the same pair with
    its key decrypted answers https."""
    cert, key = encrypted_key
    plain = tmp_path / "plain.pem"
    subprocess.run(
        ["openssl", "pkey", "-in", str(key), "-passin", "pass:secret", "-out", str(plain)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    answers: list[bytes] = []

    def get_healthz(shown: str) -> None:
        url = re.search(r"serving on (https://127\.0\.0\.1:\d+/)", shown)
        assert url, shown
        unverified = ssl.create_default_context()
        unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
        with urllib.request.urlopen(url[1] + "healthz", context=unverified, timeout=30) as r:
            answers.append(r.read())

    args = [*_serve_args(["--port", "0"]), "--tls-cert", str(cert), "--tls-key", str(plain)]
    shown, status = on_terminal(args, 240, until="metrics token", ready=get_healthz)
    assert status == 0, shown
    assert answers and answers[0].startswith(b"ok"), (answers, shown)
    assert "token=p-SECRET&view_token=v-SECRET" in shown, shown
    assert "overlay?stream=main&token=v-SECRET" in shown and "<hidden>" not in shown


@pytest.mark.model
def test_show_tokens_prints_them_into_a_pipe() -> None:
    """Not a terminal (a log): hidden unless --show-tokens asks (tests/cli/test_cli_config.py
    has the hidden case)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamcap.cli", *_serve_args(["--port", "0"]), "--show-tokens"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        for line in proc.stderr:
            lines.append(line)
            if "metrics" in line or proc.poll() is not None:
                break
        text = "".join(lines)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, text + err
    assert "token=p-SECRET&view_token=v-SECRET" in text and "<hidden>" not in text + err, text
