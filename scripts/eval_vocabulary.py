"""What a vocabulary prompt does: named words it lists, and WER everywhere else, side by side.

    .venv/bin/python scripts/eval_vocabulary.py [--vocabulary "Patel, Amsterdam"] [--json out.json]

What it does, and every option: streamcap/evaluation/eval_vocabulary.py (this file only starts it).
"""

from streamcap.evaluation.eval_vocabulary import main

if __name__ == "__main__":
    raise SystemExit(main())
