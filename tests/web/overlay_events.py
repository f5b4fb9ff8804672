"""Recorded caption event sequences for the overlay's layout tests, and how they were made.

The overlay's line layout is tested on what the server really sends: every partial and final
of a whole run, with their stream times, so that the tests need no model. The sequences in
`tests/web/data/` were recorded with this module from the bundled Whisper base model on the
computation-aware simulated clock (the live pipeline of `streamcap transcribe --live`), charged
with the CPU time of one thread (`time.process_time`, torch on one thread), so that a busy
machine where they were made does not thin out the partials:

- `lf3_speakers`: the shared dev file lf3 (5:27, ten voices) with `--speakers auto`, so finals
  carry voice labels ("Speaker 1", ...) and long finals of one voice wrap over several lines.
- `room_ana` / `room_ben`: the two publishers of a room, each its own microphone, talking
  partly at once (Ben starts while Ana is still speaking). The test publishes both into one
  stream of a real server, which numbers and names them as a room.

Regenerate (minutes of CPU)::

    .venv/bin/python tests/web/overlay_events.py

Each line of a `.jsonl.gz` file is one caption event as the pipeline emitted it, before the
server numbers it: `at` (stream seconds when it came out), `type`, `segment`, `text`, `start`,
`end`, `committed_chars`, `latency_ms`, `speaker`.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
SR = 16000


def load(name: str) -> list[dict[str, Any]]:
    """The recorded events of `name` (`lf3_speakers`, `room_ana`, `room_ben`), in order."""
    with gzip.open(DATA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _record(name: str, audio: Any, speakers: str) -> None:  # pragma: no cover - regeneration
    """Run `audio` (16 kHz mono float) through a live stream on the simulated clock and write
    every event it emits, with the stream time it came out at."""
    import time

    import torch

    from streamcap.cli.live_options import speaker_stage
    from streamcap.core.captions import CaptionEvent
    from streamcap.runtime.clock import SimulatedClock
    from streamcap.runtime.engine import Engine
    from streamcap.runtime.replay import replay
    from streamcap.runtime.stream import LiveStream
    from streamcap.runtime.worker import InferenceWorker

    torch.set_num_threads(1)
    engine = Engine("base", device="cpu")
    clock = SimulatedClock(timer=time.process_time)
    worker = InferenceWorker(engine)
    events: list[dict[str, Any]] = []
    stream: LiveStream

    def on_caption(ev: CaptionEvent) -> None:
        events.append(
            {
                "at": round(stream.now(), 3),
                "type": ev.type,
                "segment": ev.segment,
                "text": ev.text,
                "start": round(ev.start, 3),
                "end": round(ev.end, 3),
                "committed_chars": ev.committed_chars,
                "latency_ms": round(ev.latency_ms, 1),
                "speaker": ev.speaker,
            }
        )

    stream = LiveStream(name, worker, on_caption, None, clock, speaker_stage(speakers, clock))
    replay(stream, audio, chunk_s=0.1)
    DATA.mkdir(exist_ok=True)
    with gzip.open(DATA / f"{name}.jsonl.gz", "wt", encoding="utf-8") as f:
        for ev in events:
            f.write(json.dumps(ev, ensure_ascii=False) + "\n")
    finals = sum(e["type"] == "final" for e in events)
    print(f"{name}: {len(events)} events, {finals} finals", file=sys.stderr)


def main() -> None:  # pragma: no cover - regeneration
    import numpy as np
    import soundfile as sf

    from streamcap.evaluation.paths import EVAL_DEV, LONGFORM

    def wav(path: Path) -> Any:
        audio, rate = sf.read(path, dtype="float32")
        assert rate == SR, path
        return audio

    def gap(seconds: float) -> Any:
        return np.zeros(int(seconds * SR), np.float32)

    only = set(sys.argv[1:])
    if not only or "lf3_speakers" in only:
        _record("lf3_speakers", wav(LONGFORM / "lf3_real_dev.wav"), "auto")
    clips = EVAL_DEV / "wav"
    # Ana: JFK, "forever", LibriVox 0890; Ben starts during Ana's first sentence: LibriVox
    # 0870, "go forward", LibriVox 0880 (a room's publishers overlap when people talk at once)
    ana = [gap(0.5), wav(clips / "en_real_jfk.wav"), gap(1.5), wav(clips / "en_real_forever.wav")]
    ana += [gap(6.0), wav(clips / "en_real_librivox_0890.wav"), gap(1.0)]
    ben = [gap(5.0), wav(clips / "en_real_librivox_0870.wav"), gap(4.0)]
    ben += [
        wav(clips / "en_real_goforward.wav"),
        gap(1.0),
        wav(clips / "en_real_librivox_0880.wav"),
    ]
    ben += [gap(1.0)]
    if not only or "room_ana" in only:
        _record("room_ana", np.concatenate(ana), "off")
    if not only or "room_ben" in only:
        _record("room_ben", np.concatenate(ben), "off")


if __name__ == "__main__":  # pragma: no cover
    main()
