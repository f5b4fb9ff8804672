"""How long `--help` takes: ``streamcap --help`` and ``streamcap transcribe --help``.

Each command runs N times in a fresh interpreter (what a user waits for); the median wall time
is printed. With ``--against REV`` (default HEAD, when run in a git checkout) the same commands
also run on the package as it is at that revision, extracted to a temporary folder with
``git archive``, so the figure comes with its "before".

    .venv/bin/python scripts/bench_cli_help.py -n 7 --against HEAD
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from streamcap.evaluation.paths import ROOT

COMMANDS: tuple[tuple[str, ...], ...] = (("--help",), ("transcribe", "--help"))


def median_seconds(args: tuple[str, ...], n: int, root: Path) -> float:
    """Median wall time of ``python -m streamcap.cli ARGS`` with ``root`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "streamcap.cli", *args],
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            check=True,
        )
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def extract(rev: str, into: Path) -> Path:
    """The `streamcap` package at git revision ``rev``, unpacked under ``into``."""
    archive = into / "src.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "archive", rev, "streamcap"], cwd=ROOT, stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, default=5, help="runs per command (default: 5)")
    ap.add_argument(
        "--against",
        metavar="REV",
        default="HEAD" if (ROOT / ".git").exists() and shutil.which("git") else None,
        help="also time the package at this git revision (default: HEAD in a checkout; '' to skip)",
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        old = extract(args.against, Path(tmp)) if args.against else None
        print(f"{'command':36s}{'now':>9s}" + (f"{args.against:>12s}" if old else ""))
        for cmd in COMMANDS:
            label = "streamcap " + " ".join(cmd)
            now = median_seconds(cmd, args.n, ROOT)
            line = f"{label:36s}{now:8.3f}s"
            if old is not None:
                before = median_seconds(cmd, args.n, old)
                line += f"{before:11.3f}s   ({before / now:.1f}x faster now)"
            print(line, flush=True)
    print(f"median of {args.n} runs each, {sys.executable}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
