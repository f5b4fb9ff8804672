#!/usr/bin/env python
"""Record every call a caption policy gets and every answer it gives; replay them on this
checkout's `CaptionPolicy` and compare (issue 24: the window's states made explicit must not
change one output).

    PYTHONPATH=BEFORE python scripts/policy_replay.py record --audio A.wav [B.wav ...] \
        --out DIR [--decoder standin|model] [--only VARIANT ...] [--seeds N]
    PYTHONPATH=AFTER python scripts/policy_replay.py check DIR/*.pkl

``record`` drives a recording subclass of the installed `CaptionPolicy` (BEFORE: a checkout of
the code before a change) with real audio, once per variant (`VARIANTS`, `MODEL_VARIANTS`):
- ``--decoder model``: the live pipeline itself (scripts/eval_stream.py's `run_stream`:
  `LiveStream`, the real worker and Whisper model, the simulated clock), the policy class
  swapped for the recorder in `streamcap.runtime.stream` (nothing else changes);
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
import hashlib
import pickle
import random
import sys
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from streamcap.audio import load_audio
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.decode_types import DecodeResult, WordTiming
from streamcap.core.policy import CaptionPolicy, DecodeRequest, PolicyConfig, Step
from streamcap.core.segmenter import Segmenter, SegmenterConfig

SR = SAMPLE_RATE
Call = tuple[str, tuple[Any, ...], Any]


# --------------------------------------------------------------------------- answers


def _request(r: DecodeRequest) -> tuple[Any, ...]:
    digest = hashlib.sha1(np.ascontiguousarray(r.audio).tobytes()).hexdigest()
    return (r.id, r.kind, r.window, r.start, r.end, r.words, len(r.audio), digest)


def _step(step: Step) -> tuple[Any, ...]:
    return (tuple(_request(r) for r in step.requests), tuple(step.captions))


def _counters(p: CaptionPolicy) -> tuple[Any, ...]:
    return (dict(p.early_finals), dict(p.drops), p.committed_text, p.in_speech)


def make_recorder(calls: list[Call]) -> type[CaptionPolicy]:
    """A `CaptionPolicy` that appends (name, arguments, answer) to `calls` for each call."""

    class Recorder(CaptionPolicy):
        def _log(self, name: str, args: tuple[Any, ...], answer: Any) -> None:
            calls.append((name, args, (answer, _counters(self))))

        def on_event(self, event: Any, now: float | None = None) -> Step:
            out = super().on_event(event, now)
            self._log("on_event", (event, now), _step(out))
            return out

        def on_tick(self, stream_time: float, now: float | None = None, early: bool = True) -> Step:
            out = super().on_tick(stream_time, now, early)
            self._log("on_tick", (stream_time, now, early), _step(out))
            return out

        def on_result(self, request: DecodeRequest, result: Any, now: float) -> Step:
            out = super().on_result(request, result, now)
            self._log("on_result", (request.id, result, now), _step(out))
            return out

        def finish(self, now: float | None = None) -> Step:
            out = super().finish(now)
            self._log("finish", (now,), _step(out))
            return out

        def prepare(self, request: DecodeRequest) -> Any:
            out = super().prepare(request)
            self._log("prepare", (request.id,), (out.prompt, out.hypothesis))
            return out

        def take_drops(self) -> Any:
            out = super().take_drops()
            self._log("take_drops", (), tuple(out))
            return out

    return Recorder


def check(trace: dict[str, Any]) -> tuple[int, dict[str, int]]:
    """Replay `trace` on a fresh `CaptionPolicy`: the calls compared, and the answers' items
    (requests, partial and final captions, prepared inputs, dropped finals) by kind."""
    pol = CaptionPolicy(trace["config"])
    emitted: dict[int, DecodeRequest] = {}
    counts = {"requests": 0, "partials": 0, "finals": 0, "prepared": 0, "drops": 0}
    for i, (name, args, expected) in enumerate(trace["calls"]):
        if name == "on_result":
            rid, result, now = args
            out: Any = pol.on_result(emitted[rid], result, now)
        elif name == "prepare":
            inputs = pol.prepare(emitted[args[0]])
            out = (inputs.prompt, inputs.hypothesis)
        elif name == "take_drops":
            out = tuple(pol.take_drops())
        else:
            out = getattr(pol, name)(*args)
        if isinstance(out, Step):
            emitted.update((r.id, r) for r in out.requests)
            counts["requests"] += len(out.requests)
            for c in out.captions:
                counts[c.type + "s"] += 1
            out = _step(out)
        elif name == "take_drops":
            counts["drops"] += len(out)
        else:
            counts["prepared"] += 1
        got = (out, _counters(pol))
        if got != expected:
            raise SystemExit(f"call {i} ({name}{args[:1]}): expected\n{expected}\ngot\n{got}")
    return len(trace["calls"]), counts


def count_transitions() -> collections.Counter[tuple[Any, Any, Any]] | None:
    """Count every (state, event, new state) the checked policy takes (None: a policy
    without `policy_states`, the one before issue 24)."""
    try:
        from streamcap.core.policy_states import StateMachine
    except ImportError:
        return None
    seen: collections.Counter[tuple[Any, Any, Any]] = collections.Counter()
    fire = StateMachine.fire

    def counted(self: Any, event: Any) -> Any:
        before = self.state
        new = fire(self, event)
        seen[(before, event, new)] += 1
        return new

    StateMachine.fire = counted  # type: ignore[method-assign]
    return seen


def report_transitions(seen: collections.Counter[tuple[Any, Any, Any]]) -> None:
    from streamcap.core import policy_states as ps

    for name in ("WINDOW_TRANSITIONS", "PARTIAL_TRANSITIONS", "SPEECH_TRANSITIONS"):
        table = getattr(ps, name)
        for state, row in table.items():
            for event, new in row.items():
                n = seen[(state, event, new)]
                print(f"  {name} {state.name} --{event.name}--> {new.name}: {n}")


# --------------------------------------------------------------------------- stand-in decoder

_WORDS = (
    "the a to of and we you it said when there Mr. time people call number "
    "again please menu press say hello world morning yesterday country ask what your can do for"
)
VOCAB = _WORDS.split()


class StandIn:
    """Hears a word in every loud 0.3 s slot of the file (see the module docstring)."""

    def __init__(self, audio: np.ndarray, rng: random.Random, slot: float = 0.3) -> None:
        n = int(slot * SR)
        rms = [
            float(np.sqrt(np.mean(audio[i : i + n] ** 2) + 1e-12)) for i in range(0, len(audio), n)
        ]
        loud = 0.25 * float(np.percentile(rms, 90))
        self.rng = rng
        self.words: list[tuple[str, float, float]] = []
        for k, level in enumerate(rms):
            if level >= loud:
                h = (k * 2654435761) % 2**32
                word = VOCAB[h % len(VOCAB)] + ("." if h % 7 == 0 else "," if h % 11 == 0 else "")
                self.words.append((word, k * slot + 0.02, k * slot + slot - 0.04))

    def __call__(self, req: DecodeRequest) -> DecodeResult:
        rng, eps = self.rng, 1e-4
        heard = [w for w in self.words if w[1] >= req.start - eps and w[2] <= req.end + eps]
        if req.kind == "partial":
            cut = [w for w in self.words if w[1] < req.end < w[2] - eps]
            if cut:
                heard.append((cut[0][0][: 1 + int(req.end * 37) % 3] + "~", cut[0][1], req.end))
            if heard and rng.random() < 0.15:  # another case or mark for the last word
                w = heard[-1]
                heard[-1] = (w[0].capitalize() + rng.choice(["", ".", ","]), w[1], w[2])
        if not heard:
            roll = rng.random()
            if roll < 0.4:
                return DecodeResult((), "", "en", 0.9, -1.2, "eot")
            if roll < 0.7:
                return DecodeResult((50,), " Thank you.", "en", 0.7, -0.5, "eot")
            return DecodeResult((), "", "en", 0.1, None, "eot")
        texts = [w[0] for w in heard]
        stopped = "eot"
        if rng.random() < 0.03:
            texts, stopped = texts + texts[-2:] * 4, "loop"
        tokens = tuple(sum(map(ord, t)) % 50000 for t in texts)
        result = DecodeResult(tokens, " " + " ".join(texts), "en", 0.05, -0.3, stopped)
        if req.words and rng.random() < 0.9 and stopped == "eot":
            timed = tuple(
                WordTiming(" " + t, max(0.0, a - req.start), b - req.start, 0.9)
                for t, (_, a, b) in zip(texts, heard, strict=True)
            )
            result = replace(result, words=timed)
        return result


def record_standin(
    audio: np.ndarray,
    config: PolicyConfig,
    seg: SegmenterConfig,
    early: str,
    seed: int,
    order: str = "finals",
) -> list[Call]:
    calls: list[Call] = []
    rng = random.Random(seed)
    pol = make_recorder(calls)(config)
    decoder = StandIn(audio, rng)
    segmenter = Segmenter(seg)
    queue: list[DecodeRequest] = []
    busy = 0.0

    def apply(step: Step) -> None:
        queue.extend(step.requests)
        pol.take_drops()

    def run_until(t: float) -> None:
        nonlocal busy
        while queue and busy < t:
            first = [r for r in queue if (r.kind == "final") == order.startswith("finals")]
            req = first[0] if first and rng.random() < 0.8 else rng.choice(queue)
            queue.remove(req)
            if rng.random() < 0.08:  # dropped by the worker: no result
                apply(pol.on_result(req, None, busy))
                continue
            pol.prepare(req)
            slow = 4.0 if order.endswith("slow") else 1.0
            busy += slow * rng.uniform(0.02, 0.25 + 0.03 * (req.end - req.start))
            apply(pol.on_result(req, decoder(req), busy))

    chunk = int(0.1 * SR)
    use_early = early != "off"
    for i in range(0, len(audio), chunk):
        t = (i + chunk) / SR
        busy = max(busy, t - 0.1)
        run_until(t)
        if early == "flip" and rng.random() < 0.05:
            use_early = not use_early
        for ev in segmenter.push(audio[i : i + chunk]):
            apply(pol.on_event(ev, t))
        apply(pol.on_tick(segmenter.time, t, use_early))
    end = len(audio) / SR
    for ev in segmenter.flush():
        apply(pol.on_event(ev, end))
    apply(pol.finish(end))
    run_until(float("inf"))
    return calls


_ENGINE: list[Any] = []  # loaded once per process


def record_model(audio: np.ndarray, settings: list[str], early: str) -> tuple[list[Call], Any]:
    """The live pipeline as scripts/eval_stream.py runs it (simulated clock, thread timer)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import eval_stream  # type: ignore[import-not-found]

    import streamcap.runtime.stream as stream_module
    from streamcap.runtime.engine import Engine

    calls: list[Call] = []
    stream_module.CaptionPolicy = make_recorder(calls)  # type: ignore[misc]
    config = eval_stream.build_config("en", settings)
    if early != "auto":
        config = replace(config, early_finals=early)
    if not _ENGINE:
        _ENGINE.append(Engine("base"))
    engine = _ENGINE[0]
    eval_stream.warm_up(engine, audio, config.language)
    eval_stream.run_stream(engine, audio, config, "simulated", 0.1, "thread")
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
