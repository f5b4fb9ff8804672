"""`streamcap transcribe FILE --live`, and what it shares with `dictate`.

Both run the same `LiveStream` on an `InferenceWorker` as the caption server. Here a file is
replayed, paced in real time (``--clock real``) or on the computation-aware simulated clock
(``--clock simulated``), and every partial and final is printed with the stream time it came
out at: what a viewer would have seen, and when. On a terminal the partial is rewritten in place
and each final gets its own line (`LiveLines`, dictate's display too); piped, every event is a
line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamcap.cli.common import say
from streamcap.cli.live_options import LiveOptions, speaker_stage
from streamcap.cli.model_options import load_engine
from streamcap.cli.outputs import Writers, cue_style_of, plan_outputs

if TYPE_CHECKING:
    from streamcap.cli.model_options import ModelOptions, TaskOptions
    from streamcap.cli.outputs import CueOptions, OutputOptions
    from streamcap.core.captions import Caption, CaptionEvent
    from streamcap.core.live_config import LiveConfig
    from streamcap.runtime.engine_api import InferenceEngine

#: ``--chunk`` and ``--clock`` of `transcribe --live`.
DEFAULT_CHUNK_S = 0.1
CLOCKS = ("simulated", "real")
DEFAULT_CLOCK = "simulated"


@dataclass(frozen=True)
class ReplayOptions:
    """`transcribe --live`: the live pipeline's options, and how the file is fed to it (the
    clock, the seconds of audio per feed)."""

    live: LiveOptions = field(default_factory=LiveOptions)
    clock: str = DEFAULT_CLOCK
    chunk_s: float = DEFAULT_CHUNK_S


def ready_engine(model: ModelOptions, task: TaskOptions, config: LiveConfig) -> InferenceEngine:
    """Load the model (`load_engine`) and warm it up: the first calls pick kernels and
    allocate (~1 s), a cost to pay before audio flows, not on the first caption."""
    import numpy as np

    from streamcap.core.constants import SAMPLE_RATE
    from streamcap.core.decode_types import DecodingOptions
    from streamcap.runtime.engine import adapt_threads
    from streamcap.runtime.worker import encode_window

    engine = load_engine(model, task)
    adapt_threads(engine)  # a live stream's thread counts follow the machine's load
    clip = np.zeros(SAMPLE_RATE, dtype=np.float32)
    opts = DecodingOptions(language=config.language if engine.multilingual else None)
    engine.decode(encode_window(engine, clip, None), opts)
    if config.partial_context_margin_s is not None:
        engine.decode(encode_window(engine, clip, config.partial_context_min_s), opts)
    return engine


def caption_head(cap: Caption, at: float) -> str:
    """What a replayed event's line starts with: emit time, kind, segment, audio span."""
    kind = "FINAL  " if cap.type == "final" else "partial"
    return f"[{at:7.2f}s] {kind} #{cap.segment:<3d} {cap.start:7.2f}-{cap.end:7.2f}  "


def format_caption(cap: Caption, at: float) -> str:
    """One line for a caption event: emit time, kind, segment, audio span, text."""
    return caption_head(cap, at) + _spoken(cap)


def _spoken(cap: Caption) -> str:
    return f"{cap.speaker}: {cap.text}" if cap.speaker else cap.text


class LiveLines:
    """Live captions on stdout: each final on its own line; on a terminal the current partial
    is rewritten in place (rich), its words not yet committed dimmed, instead of a new line
    per update. Off a terminal, partials are printed one per line with `partial_lines` (the
    replay's log) or not at all (dictation into a file). A line may start with a `head`
    (`caption_head`); a final with no text is printed only then (its times are news)."""

    def __init__(self, show_partials: bool, *, partial_lines: bool = False) -> None:
        from rich.console import Console

        self.console = Console(stderr=False, highlight=False)
        self.interactive = self.console.is_terminal and show_partials
        self.partial_lines = show_partials and partial_lines and not self.interactive
        self.live: Any = None

    def __enter__(self) -> LiveLines:
        if self.interactive:
            from rich.live import Live

            # Notes on stderr go above the live line when both are this terminal; else they
            # stay on stderr (rich would move them onto stdout).
            self.live = Live(
                "",
                console=self.console,
                refresh_per_second=12,
                transient=True,
                redirect_stderr=sys.stderr.isatty(),
            ).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None

    def show(self, cap: Caption, head: str = "") -> None:
        if cap.type == "final":
            if self.live is not None:
                self.live.update("", refresh=True)
            if cap.text.strip() or head:
                self._print(head + _spoken(cap))
        elif self.live is not None:
            from rich.text import Text

            name = f"{cap.speaker}: " if cap.speaker else ""
            t = Text(head + name + cap.text[: cap.committed_chars])
            t.append(cap.text[cap.committed_chars :], style="dim")
            self.live.update(t, refresh=True)
        elif self.partial_lines:
            self._print(head + _spoken(cap))

    def _print(self, line: str) -> None:
        if self.live is not None:
            self.live.console.print(line, markup=False)
        else:
            print(line, flush=True)


def run_transcribe_live(
    path: str,
    options: ReplayOptions,
    outputs: OutputOptions,
    cues: CueOptions,
    model: ModelOptions,
    task: TaskOptions,
    speakers: str,
    enroll: tuple[tuple[str, str], ...] = (),
    name: str | None = None,
) -> int:
    """Replay the file at `path`: print partials and finals with their times, write finals
    (named after `name`, the input as given, when `path` is a copy of standard input)."""
    from streamcap.audio import iter_audio_chunks

    [targets] = plan_outputs([name or path], outputs.outputs, outputs.formats)
    style = cue_style_of(cues, [targets])
    config = options.live.config
    chunk_s = options.chunk_s
    chunks = iter_audio_chunks(path, chunk_s=chunk_s)  # AudioError now on a bad file
    first = next(chunks)

    # the runtime (torch) only once the file opened: a bad one costs a fraction of a second
    from streamcap.core.captions import CaptionLog
    from streamcap.runtime.clock import RealClock, SimulatedClock
    from streamcap.runtime.replay import replay
    from streamcap.runtime.stream import LiveStream
    from streamcap.runtime.worker import InferenceWorker

    engine = ready_engine(model, task, config)
    simulated = options.clock == "simulated"
    clock = SimulatedClock() if simulated else RealClock()
    worker = InferenceWorker(engine)
    log = CaptionLog("file")  # the sink numbers the stream's events
    lines = LiveLines(options.live.partials, partial_lines=True)
    with Writers(targets, style=style) as writers, lines:
        stream: LiveStream

        def on_caption(event: CaptionEvent) -> None:
            cap = log.add(event)
            writers.write(cap)
            lines.show(cap, caption_head(cap, stream.now()))

        stage = speaker_stage(speakers, clock, enroll)
        stream = LiveStream("file", worker, on_caption, config, clock, stage)
        wall0 = time.perf_counter()
        try:
            replay(stream, _chain(first, chunks), chunk_s=chunk_s)
        except KeyboardInterrupt:
            if simulated:  # the worker is stepped by replay itself: nothing more will come
                say(f"\nstreamcap transcribe: interrupted at {stream.fed_s:.1f} s")
                return 130
            stream.finish()  # the worker thread still runs: let it deliver the open final
            stream.wait_idle(60)
        finally:
            if worker.threaded:
                worker.stop()
        stats = worker.stream_stats(stream.stream_id)
        audio_s = stream.fed_s
        say(
            f"{audio_s:.1f} s of audio, {stats.compute_s:.1f} s compute "
            f"(RTF {stats.compute_s / max(audio_s, 1e-9):.2f}), {stats.finals} finals, "
            f"{stats.partials} partials, wall {time.perf_counter() - wall0:.1f} s"
        )
    if stream.errors:  # a decode failed in the worker: a bug, with its own traceback
        raise stream.errors[0]
    writers.say_wrote()
    return 0


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest
