"""How far behind the voice the overlay's lit word is (`highlight=words`, issue 37 item 6),
measured as a viewer meets it: a long-form dev file published at real time into a real caption
server on loopback (the bundled model, the product's live pipeline), overlays in real headless
Chromium polled every `POLL_MS`, and each poll's lit word compared to the reference word times
(`reference_words`: the reference text force-aligned to the audio, independent of the live
path). The figures are `highlight_metrics.summarize`'s.

Two overlays watch the same run: ``after``, the checkout's own ``web/``, and, with
``--baseline-web DIR`` (a copy of ``web/`` from before, e.g. a worktree of the previous commit),
``before``, served from a folder ``base/`` beside it (its script paths rewritten to it), so
both are measured on the same captions at the same moments.

    python -m streamcap.evaluation.highlight_lag --start 0 --seconds 120 \\
        --baseline-web /work/base/web --json out/highlight_lf3.json

Stream time: the server's stream clock starts when the first audio frame arrives, less its
length; the publisher here sends frame ``k`` (audio up to ``(k + 1) * FRAME_S``) at
``t0 + k * FRAME_S``, so the voice at stream time ``t`` is heard at wall time
``t0 - FRAME_S + t``, the server's own zero (a microphone would add its buffer on top).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.live_config import LiveConfig
from streamcap.evaluation.highlight_metrics import Poll, summarize
from streamcap.evaluation.metrics import percentile
from streamcap.evaluation.normalize import make_normalizer
from streamcap.evaluation.output import fmt, json_default
from streamcap.evaluation.paths import LONGFORM, ROOT
from streamcap.evaluation.reference_words import (
    RefWord,
    align_reference,
    load_reference_words,
    save_reference_words,
)
from streamcap.evaluation.settings import build_config

CHROMIUM = "/usr/bin/chromium"
POLL_MS = 200
FRAME_S = 0.1
STREAM = "highlight"
#: Each poll: the wall time (epoch ms) and every lit word (`.now`) with its text, the
#: overlay's own time for it (`data-start`) and whose it is.
PROBE = """(ms) => {
  window.hlPolls = [];
  setInterval(() => {
    const lit = [...document.querySelectorAll("#box .now")].map((el) => ({
      word: el.textContent, start: Number(el.dataset.start), who: el.dataset.who || "" }));
    window.hlPolls.push({ t: performance.timeOrigin + performance.now(), lit });
  }, ms);
}"""
OVERLAY_PARAMS = "highlight=words&hold=0&lines=3&size=40"


def _web_dir(base: Path | None, tmp: Path) -> Path:
    """The checkout's ``web/``, with ``base/`` holding the baseline's pages (their
    ``/static/`` paths rewritten to ``/static/base/``) when there is one."""
    web = tmp / "web"
    shutil.copytree(ROOT / "web", web)
    if base is not None:
        (web / "base").mkdir()
        for f in base.iterdir():
            if f.suffix in (".html", ".js"):
                text = f.read_text(encoding="utf-8").replace('"/static/', '"/static/base/')
                (web / "base" / f.name).write_text(text, encoding="utf-8")
    return web


def _excerpt(
    segments: Sequence[dict[str, Any]], start: float, seconds: float | None, duration: float
) -> tuple[float, float]:
    """[from, until) of the file to publish: ``start`` moved back into the pause before the
    first utterance that starts at or after it, ``until`` into the pause after the last
    utterance that ends within ``seconds`` of it (or the end of the file)."""
    begin = next((i for i, s in enumerate(segments) if s["start"] >= start), len(segments))
    lo = 0.0 if begin == 0 else (segments[begin - 1]["end"] + segments[begin]["start"]) / 2
    if seconds is None:
        return lo, duration
    last = max((i for i, s in enumerate(segments) if s["end"] <= lo + seconds), default=begin)
    hi = duration if last + 1 >= len(segments) else segments[last]["end"] + 0.3
    return lo, min(duration, hi)


def _publish(url: str, audio: np.ndarray, started: list[float]) -> None:
    """``audio`` at real-time pace (`client.publish`), then stop; ``started`` gets the wall
    time (epoch s) the first frame left."""
    from streamcap.server.client import publish

    def on_frame(_: float) -> None:
        if not started:
            started.append(time.time())

    asyncio.run(publish(url, audio, SAMPLE_RATE, frame_s=FRAME_S, on_frame=on_frame))


def _polls(raw: list[dict[str, Any]], zero: float) -> list[Poll]:
    """The page's polls in stream seconds; of several lit words (speakers) the latest."""
    out = []
    for p in raw:
        t = p["t"] / 1000 - zero
        lit = [w for w in p["lit"] if math.isfinite(w["start"])]
        if lit:
            w = max(lit, key=lambda w: w["start"])
            out.append(Poll(t, str(w["word"]), float(w["start"])))
        else:
            out.append(Poll(t))
    return out


def _watch(url: str, events: list[dict[str, Any]], stop: threading.Event) -> None:
    """Every caption event a plain viewer gets, until ``stop``."""
    from websockets.sync.client import connect

    with connect(url) as ws:
        while not stop.is_set():
            try:
                msg = ws.recv(timeout=0.5)
            except TimeoutError:
                continue
            ev = json.loads(msg)
            if ev.get("type") in ("partial", "final"):
                events.append(ev)


def measure(
    audio: np.ndarray, config: LiveConfig, baseline: Path | None, tail_s: float = 8.0
) -> tuple[dict[str, list[Poll]], list[dict[str, Any]]]:
    """Publish ``audio`` into a real server and poll its overlays (see the module): the
    polls of each page (``after``; ``before`` with a baseline), in stream seconds, and the
    caption events of the run."""
    from playwright.sync_api import sync_playwright

    from streamcap.runtime.engine import Engine
    from streamcap.runtime.worker import InferenceWorker
    from streamcap.server.client import ws_url
    from streamcap.server.config import ServerConfig, live_stream_factory
    from streamcap.server.thread import ServerThread

    worker = InferenceWorker(Engine("base")).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            web = _web_dir(baseline, Path(tmp))
            cfg = ServerConfig(port=0, admission=False, web_dir=web, burst_s=None)
            factory = live_stream_factory(worker, config)
            with ServerThread(cfg, worker, stream_factory=factory) as srv, sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
                )
                pages = {"after": f"/overlay?stream={STREAM}&{OVERLAY_PARAMS}"}
                if baseline is not None:
                    pages["before"] = f"/static/base/overlay.html?stream={STREAM}&{OVERLAY_PARAMS}"
                tabs = {}
                for name, path in pages.items():
                    tab = browser.new_page(viewport={"width": 1920, "height": 1080})
                    tab.goto(srv.url(path))
                    tab.evaluate(PROBE, POLL_MS)
                    tabs[name] = tab
                base = srv.url("", websocket=True)
                events: list[dict[str, Any]] = []
                done = threading.Event()
                viewer = threading.Thread(
                    target=_watch, args=(ws_url(base, "captions", STREAM), events, done)
                )
                viewer.start()
                url = ws_url(base, "ingest", STREAM)
                started: list[float] = []
                sender = threading.Thread(target=_publish, args=(url, audio, started))
                sender.start()
                sender.join()
                time.sleep(tail_s)  # the last final and its highlight
                raw = {name: tab.evaluate("window.hlPolls") for name, tab in tabs.items()}
                browser.close()
                done.set()
                viewer.join(10)
    finally:
        worker.stop()
    zero = started[0] - FRAME_S
    return {name: _polls(polls, zero) for name, polls in raw.items()}, events


def latencies(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How many partials and finals came, and their ``latency_ms`` (p50 / p95, seconds)."""
    out: dict[str, Any] = {}
    for kind in ("partial", "final"):
        late = [e["latency_ms"] / 1000 for e in events if e["type"] == kind and e["text"].strip()]
        out[f"{kind}s"] = len(late)
        out[f"{kind}_latency_p50_s"] = percentile(late, 50)
        out[f"{kind}_latency_p95_s"] = percentile(late, 95)
    return out


def reference_words(path: Path | None, audio: np.ndarray, segments: Any) -> list[RefWord]:
    """The reference word times: read from ``path`` when it exists, else aligned (and saved
    there when a path is given)."""
    if path is not None and path.exists():
        return load_reference_words(path)
    from streamcap.runtime.engine import Engine

    words = align_reference(Engine("base"), audio, segments)
    if path is not None:
        save_reference_words(path, words, "reference text of the run's file")
    return words


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--audio", type=Path, default=LONGFORM / "lf3_real_dev.wav")
    ap.add_argument("--reference", type=Path, default=LONGFORM / "lf3_real_dev.json")
    ap.add_argument("--ref-words", type=Path, help="reference word times (JSON; made if absent)")
    ap.add_argument("--start", type=float, default=0.0, help="excerpt start (seconds)")
    ap.add_argument("--seconds", type=float, help="excerpt length (default: to the end)")
    ap.add_argument("--baseline-web", type=Path, help="web/ of the version to compare with")
    ap.add_argument("--partial-interval", type=float, help="seconds of speech between partials")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a live setting, as eval_stream takes it (e.g. holdback_words=1)",
    )
    ap.add_argument("--json", type=Path, help="write the figures and polls here")
    args = ap.parse_args(argv)
    audio, rate = sf.read(args.audio, dtype="float32")
    if rate != SAMPLE_RATE or audio.ndim != 1:
        raise SystemExit(f"{args.audio}: want 16 kHz mono, got {rate} Hz, shape {audio.shape}")
    segments = json.loads(args.reference.read_text(encoding="utf-8"))["segments"]
    ref = reference_words(args.ref_words, audio, segments)
    lo, hi = _excerpt(segments, args.start, args.seconds, len(audio) / SAMPLE_RATE)
    config = build_config(None, args.set)
    if args.partial_interval is not None:
        policy = replace(config.policy, partial_interval_s=args.partial_interval)
        config = replace(config, policy=policy)
    clip = audio[round(lo * SAMPLE_RATE) : round(hi * SAMPLE_RATE)]
    shifted = [replace(w, start=w.start - lo, end=w.end - lo) for w in ref if lo <= w.start < hi]
    print(f"publishing {lo:.1f}-{hi:.1f} s of {args.audio.name} at real time", file=sys.stderr)
    polls, events = measure(clip, config, args.baseline_web)
    norm, _ = make_normalizer()
    figures = {name: summarize(shifted, p, norm) for name, p in polls.items()}
    keys = ["lag_p50_s", "lag_p95_s", "lag_all_p95_s", "within_goal", "unlit", "unmatched"]
    keys += ["early", "first_lit_p50_s", "first_lit_p95_s", "words_lit", "speech_polls"]
    print("page    " + " ".join(f"{k:>15}" for k in keys))
    for name, f in figures.items():
        print(f"{name:7} " + " ".join(f"{fmt(f[k], '.3f'):>15}" for k in keys))
    decoding = latencies(events)
    print("captions: " + ", ".join(f"{k} {fmt(v, '.3f')}" for k, v in decoding.items()))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "audio": str(args.audio), "from_s": lo, "until_s": hi, "figures": figures,
            "partial_interval_s": config.policy.partial_interval_s, "captions": decoding,
            "settings": args.set,
            "polls": {k: [[p.t, p.word, p.start] for p in v] for k, v in polls.items()},
        }  # fmt: skip
        args.json.write_text(json.dumps(doc, default=json_default, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
