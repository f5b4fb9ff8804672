"""Where the harness finds its data: the checkout's test clips and the shared dev set.

One definition for every script. The dev set lives in ``../shared/eval-dev`` next to the
repository, as the workplace lays it out (not a machine path); the harness runs from a checkout
(an editable install), where this file sits at ``streamcap/evaluation/paths.py``.
"""

from __future__ import annotations

from pathlib import Path

#: The repository's root (the checkout this package is in).
ROOT = Path(__file__).resolve().parents[2]
#: The bundled test clips and their manifest.
TEST_DATA = ROOT / "tests" / "data"
#: The shared dev set: clips (``manifest.jsonl``, ``wav/``) and long-form files (``longform/``).
EVAL_DEV = ROOT.parent / "shared" / "eval-dev"
LONGFORM = EVAL_DEV / "longform"
