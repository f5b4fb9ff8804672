"""Pure logic: no threads, clocks, models or sockets. Tests drive every rule here directly.

- `segmenter`: the VAD segmenter, frames in, events out (the VAD is injected).
- `policy`: when to decode, what to show as partial and final.
- `text`: word-level text helpers and the one hallucination guard.
- `captions`: caption events and the one sequencer (`CaptionLog`).
"""
