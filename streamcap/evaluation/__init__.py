"""The evaluation harness: what `scripts/*.py` measure, as a package (issue 36).

The top layer, beside `cli`: it may import every layer but `cli`, and nothing in streamcap
imports it (import-linter contracts in pyproject.toml). Each `scripts/NAME.py` is a thin entry
point that runs ``streamcap.evaluation.NAME.main``; the modules without a script hold what
several of them share, one definition each:

- `paths`: where the test clips and the shared dev set are;
- `normalize`: Whisper's English normaliser, the one way texts become words;
- `metrics`: the stream metrics (the jiwer word alignment, final and first-partial latency,
  flicker, WER, words hallucinated in pauses, percentiles), docs/design.md "Measurement";
- `settings`: ``--set NAME=VALUE`` overrides of the live and speaker configurations;
- `live_run`: one file replayed through `LiveStream` (the live pipeline, as the product runs
  it); `exactness`: every final against plain greedy decoding; `output`, `plots`: what a run
  writes;
- `meeting_runs`, `meeting_metrics`: speaker labels (`eval_meeting`);
- `load_program`, `load_clients`, `load_server`, `load_report`: the real-time load test
  (`load_test`, `soak`); `serve_process`: `streamcap serve` as a subprocess;
- `policy_trace`, `policy_standin`: the caption policy's recorded traces (`policy_replay`).

Importing this package imports nothing: each module pulls in what it needs, and the heavy
optional libraries (matplotlib, jiwer, pyannote, meeteval, Ray) only where they are used.

Its face is what several scripts and the tests share: the stream metrics (`metrics`) and
the normaliser (`normalize`), imported on first use (`streamcap._face`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcap._face import lazy_face

if TYPE_CHECKING:  # what the names are, for type checkers; imported on first use at run time
    from streamcap.evaluation.busy import busy_processes as busy_processes
    from streamcap.evaluation.highlight_metrics import GOAL_S as GOAL_S
    from streamcap.evaluation.highlight_metrics import Poll as Poll
    from streamcap.evaluation.highlight_metrics import lag_of as lag_of
    from streamcap.evaluation.highlight_metrics import match_word as match_word
    from streamcap.evaluation.highlight_metrics import same_word as same_word
    from streamcap.evaluation.highlight_metrics import summarize as summarize
    from streamcap.evaluation.metrics import FinalsAlignment as FinalsAlignment
    from streamcap.evaluation.metrics import align_finals as align_finals
    from streamcap.evaluation.metrics import evaluate as evaluate
    from streamcap.evaluation.metrics import first_shown as first_shown
    from streamcap.evaluation.metrics import flicker as flicker
    from streamcap.evaluation.metrics import hallucinated_words as hallucinated_words
    from streamcap.evaluation.metrics import percentile as percentile
    from streamcap.evaluation.metrics import wer as wer
    from streamcap.evaluation.normalize import Normalizer as Normalizer
    from streamcap.evaluation.normalize import make_normalizer as make_normalizer
    from streamcap.evaluation.reference_words import RefWord as RefWord
    from streamcap.evaluation.reference_words import align_reference as align_reference
    from streamcap.evaluation.reference_words import load_reference_words as load_reference_words
    from streamcap.evaluation.reference_words import save_reference_words as save_reference_words

#: public name -> the module of this package that defines it
_EXPORTS = {
    "busy_processes": "busy",
    "GOAL_S": "highlight_metrics",
    "Poll": "highlight_metrics",
    "lag_of": "highlight_metrics",
    "match_word": "highlight_metrics",
    "same_word": "highlight_metrics",
    "summarize": "highlight_metrics",
    "FinalsAlignment": "metrics",
    "align_finals": "metrics",
    "evaluate": "metrics",
    "first_shown": "metrics",
    "flicker": "metrics",
    "hallucinated_words": "metrics",
    "percentile": "metrics",
    "wer": "metrics",
    "Normalizer": "normalize",
    "make_normalizer": "normalize",
    "RefWord": "reference_words",
    "align_reference": "reference_words",
    "load_reference_words": "reference_words",
    "save_reference_words": "reference_words",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
