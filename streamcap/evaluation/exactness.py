"""The exactness check of a live run: every final against plain greedy decoding.

Speculative decoding promises the main model's greedy output token for token (docs/design.md,
"the exactness contract"); scripts/eval_stream.py checks it on every final a run decoded, as
`streamcap bench` does on clips: the same audio and options through `reference_decode`
(transformers-free plain greedy), compared with what the stream used.
"""

from __future__ import annotations

from typing import Any

from streamcap.core.decode_types import DecodingOptions
from streamcap.decoding.reference import reference_decode
from streamcap.runtime.engine import Engine
from streamcap.runtime.jobs import DecodeJob, JobOutcome


def check_identical(engine: Engine, decodes: list[tuple[DecodeJob, JobOutcome]]) -> dict[str, Any]:
    """Every final decode against plain greedy generate on the same audio and options."""
    checked = 0
    mismatches = []
    windows: dict[int, tuple[int, ...]] = {}  # joined windows' plain greedy tokens, by job id

    def greedy(audio: Any, options: DecodingOptions) -> tuple[int, ...]:
        enc = engine.encode(audio)
        return tuple(reference_decode(engine.decoder, enc.enc, options, enc.duration_s)[0])

    for job, out in decodes:
        if job.kind != "final" or out.result is None or out.options is None:
            continue
        checked += 1
        got = tuple(out.result.tokens)
        if out.joined is not None:  # a backlog's final (`runtime.coalesce`): cut from the
            joined = out.joined  # window's tokens, or decoded again alone
            if joined.id not in windows:
                windows[joined.id] = greedy(joined.audio, out.options)
            whole = windows[joined.id]
            n = len(got)
            if any(whole[i : i + n] == got for i in range(len(whole) - n + 1)):
                continue
        if greedy(job.audio, out.options) != got:
            mismatches.append({"window": job.window, "speculative": out.result.text})
    return {"checked": checked, "mismatches": mismatches, "identical": not mismatches}
