"""Record every call a caption policy gets and every answer it gives; replay them on this
checkout's `CaptionPolicy` and compare (issue 24: the window's states made explicit must not
change one output).

    PYTHONPATH=BEFORE python scripts/policy_replay.py record --audio A.wav [B.wav ...] \
        --out DIR [--decoder standin|model] [--only VARIANT ...] [--seeds N]
    PYTHONPATH=AFTER python scripts/policy_replay.py check DIR/*.pkl

``record`` drives a recording subclass of the installed `CaptionPolicy` (BEFORE: a checkout of
the code before a change) with real audio, once per variant (`VARIANTS`, `MODEL_VARIANTS`):
- ``--decoder model``: the live pipeline itself (`evaluation.live_run.run_stream`:
  `LiveStream`, the real worker and Whisper model, the simulated clock), its stream protocol
  handed the recorder as its policy (`core.stream.StreamProtocol`'s ``policy``: nothing else
  changes);
- ``--decoder standin``: the real segmenter on the file and a stand-in decoder (it hears a word
  wherever 0.3 s of the file is loud, garbles the word a partial cuts, times words when asked,
  says nothing or a silence phrase on quiet audio, loops now and then) on a single worker that
  picks jobs in a random order and drops some (a result of None), so that voided early
  finals, late partials of closed windows and the like come up often.
The trace holds each call's arguments (events with their samples, decode results, request ids,
clock times) and its answer (requests with a hash of their audio, caption events, prepared
inputs, dropped finals) plus the policy's counters after it. ``check`` replays a trace on a
fresh policy (AFTER: the changed code) and stops at the first answer that differs, and counts
the transitions of `policy_states` taken. Traces stay out of the repository (/tmp).
"""

from __future__ import annotations

import argparse
import collections
import pickle
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from streamcap.audio.file import load_audio
from streamcap.core.policy_config import PolicyConfig
from streamcap.core.segmenter import SegmenterConfig
from streamcap.evaluation.live_run import run_stream, warm_up
from streamcap.evaluation.policy_standin import record_standin
from streamcap.evaluation.policy_trace import (
    Call,
    check,
    count_transitions,
    make_recorder,
    report_transitions,
)
from streamcap.evaluation.settings import build_config
from streamcap.runtime.engine import Engine

_ENGINE: list[Engine] = []  # loaded once per process


def record_model(audio: np.ndarray, settings: list[str], early: str) -> tuple[list[Call], Any]:
    """The live pipeline as scripts/eval_stream.py runs it (simulated clock, thread timer)."""
    calls: list[Call] = []
    config = build_config("en", settings)
    if early != "auto":
        config = replace(config, early_finals=cast(Literal["on", "off"], early))
    if not _ENGINE:
        _ENGINE.append(Engine("base"))
    engine = _ENGINE[0]
    warm_up(engine, audio, config.language)
    recorder = make_recorder(calls)(config.policy)  # the stream's policy, recording its calls
    run_stream(engine, audio, config, "simulated", 0.1, "thread", policy=recorder)
    return calls, config.policy


_PLAIN = "keep_screen_form=False lead_words=None holdback_words=0 capitalize=False"
_FAST = "first_partial_s=0.5 partial_interval_s=0.5 lock_margin=0 agreement=3"

#: the stand-in matrix: name -> (policy settings, early finals, the segmenter's max utterance,
#: the jobs the worker mostly takes first: "finals" or "partials"; "-slow": 4 times slower)
VARIANTS: dict[str, tuple[str, str, float | None, str]] = {
    "default": ("", "on", None, "finals"),
    "early_off": ("", "off", None, "finals"),
    "early_flip": ("", "flip", None, "finals"),
    "no_early_final": ("early_final_s=None", "on", None, "finals"),
    "no_pause_final": ("pause_final_s=None", "on", None, "finals"),
    "pause_0.5": ("pause_final_s=0.5", "flip", None, "finals"),
    "locked_finals": ("exact_finals=False", "on", None, "finals"),
    "no_cut": ("cut_at_commits=False", "on", None, "finals"),
    "no_cut_locked": ("cut_at_commits=False exact_finals=False", "flip", None, "finals"),
    "no_agreement": ("agreement=0", "on", None, "finals"),
    "chars_30": ("commit_sentences=False max_locked_chars=30", "on", None, "finals"),
    "prompts": ("prompt_chars=200 prompt_scope='stream' short_prompt_s=2.0", "on", None, "finals"),
    "prompt_utt": ("prompt_chars=60", "flip", None, "finals"),
    "short_prompt": ("short_prompt_s=2.0 short_prompt_chars=40", "on", None, "finals"),
    "plain_screen": (_PLAIN + " trim_partial_punct=False", "on", None, "finals"),
    "fast_partials": (_FAST, "on", None, "finals"),
    "window_8s": ("max_window_s=8.0", "flip", None, "finals"),
    "splits_6s": ("", "on", 6.0, "finals"),
    "splits_6s_late": ("pause_final_s=None early_final_s=None", "off", 6.0, "finals"),
    "partials_first": ("", "on", None, "partials"),
    "partials_first_30": ("max_locked_chars=30", "flip", None, "partials"),
    "slow_partials_first": ("", "on", None, "partials-slow"),
    "slow": ("max_locked_chars=30", "flip", None, "finals-slow"),
}

#: the model matrix: name -> (settings as scripts/eval_stream.py --set takes them, early finals)
MODEL_VARIANTS: dict[str, tuple[str, str]] = {
    "auto": ("", "auto"),
    "on_locked": ("exact_finals=False", "on"),
    "off_no_pause": ("pause_final_s=None", "off"),
    "on_no_cut": ("cut_at_commits=False prompt_chars=100", "on"),
}


def policy_config(settings: list[str]) -> PolicyConfig:
    names = {f.name for f in fields(PolicyConfig)}
    over = {}
    for item in settings:
        name, _, raw = item.partition("=")
        if name not in names:
            raise SystemExit(f"unknown policy setting {name!r}")
        over[name] = eval(raw)  # noqa: S307 - our own command line
    return PolicyConfig(**over)


def record(audio_path: str, out: str, variant: str, decoder: str, seed: int) -> None:
    audio = load_audio(audio_path)
    if decoder == "model":
        settings, early = MODEL_VARIANTS[variant]
        calls, config = record_model(audio, settings.split(), early)
    else:
        settings, early, max_utterance, order = VARIANTS[variant]
        config = policy_config(settings.split())
        seg = SegmenterConfig()
        if max_utterance is not None:
            seg = replace(seg, max_utterance_s=max_utterance, split_search_s=2.0)
        calls = record_standin(audio, config, seg, early, seed, order)
    trace = {"audio": audio_path, "variant": variant, "config": config, "calls": calls}
    Path(out).write_bytes(pickle.dumps(trace, protocol=pickle.HIGHEST_PROTOCOL))
    print(f"{out}: {len(calls)} calls", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="record VARIANTS (MODEL_VARIANTS) for each file")
    rec.add_argument("--audio", nargs="+", required=True)
    rec.add_argument("--out", required=True, help="folder for the traces")
    rec.add_argument("--decoder", choices=("model", "standin"), default="standin")
    rec.add_argument("--only", nargs="*", help="these variants only (default: all)")
    rec.add_argument("--seeds", type=int, default=2, help="stand-in runs per variant")
    chk = sub.add_parser("check", help="replay traces on this checkout's CaptionPolicy")
    chk.add_argument("traces", nargs="+")
    args = ap.parse_args()
    if args.cmd == "record":
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        model = args.decoder == "model"
        for audio_path in args.audio:
            for name in MODEL_VARIANTS if model else VARIANTS:
                for seed in range(1 if model else args.seeds):
                    if not args.only or name in args.only:
                        path = out / f"{Path(audio_path).stem}.{name}.{seed}.pkl"
                        record(audio_path, str(path), name, args.decoder, seed)
        return
    seen = count_transitions()
    totals: collections.Counter[str] = collections.Counter()
    for path in args.traces:
        trace = pickle.loads(Path(path).read_bytes())
        t0 = time.perf_counter()
        n_calls, counts = check(trace)
        items = ", ".join(f"{v} {k}" for k, v in counts.items())
        took = time.perf_counter() - t0
        print(f"{Path(path).name}: {n_calls} calls identical ({items}; {took:.1f} s)", flush=True)
        totals.update(counts, calls=n_calls, traces=1)
    print("all identical:", ", ".join(f"{v} {k}" for k, v in totals.items()))
    if seen is not None:
        print("transitions taken:")
        report_transitions(seen)


if __name__ == "__main__":
    main()
