"""How long `--help` takes: ``streamcap --help`` and ``streamcap transcribe --help``.

    .venv/bin/python scripts/bench_cli_help.py -n 7 --against HEAD

What it does, and every option: streamcap/evaluation/bench_cli_help.py (this file only starts it).
"""

from streamcap.evaluation.bench_cli_help import main

if __name__ == "__main__":
    raise SystemExit(main())
