"""What a CPU user would pick instead, in the same run: faster-whisper's engine (CTranslate2).

faster-whisper transcribes a clip with CTranslate2: one encoder pass and a greedy (here
``beam_size=1``) decode, at int8 or fp32. The bundled weights *are* CTranslate2 models, so the
same checkpoint runs in both engines on the same log-mel features and threads. Compared with
what streamcap spends on each clip's final (its 30 s encoder and the speculative decode),
which is the work an offline transcript costs; the live partials are streamcap's extra.
Needs the ``ctranslate2`` package (a test dependency); without it the columns are skipped.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

COMPUTE_TYPES = ("int8", "float32")


def run_ct2(
    model: str,
    clips: list[tuple[Any, list[int], int]],
    threads: int,
    decode_text: Callable[[list[int]], str],
    eot: int,
) -> list[dict[str, Any]] | None:
    """For each compute type: the seconds to transcribe every clip (its log-mel as numpy
    (1, mels, 3000), its decoder prefix: sot, language, task, notimestamps, and the token
    budget streamcap's loop guard gives it, so a hallucination loop costs both the same) and
    the texts; None without ctranslate2 or for a model that is not bundled."""
    try:
        import ctranslate2
    except ImportError:
        return None
    from streamcap.models.registry import BUNDLED, ctranslate2_folder

    if model not in BUNDLED:
        return None
    import numpy as np

    out = []
    with tempfile.TemporaryDirectory(prefix="streamcap-ct2-") as tmp:
        folder = ctranslate2_folder(model, Path(tmp))
        for compute in COMPUTE_TYPES:
            ct2 = ctranslate2.models.Whisper(
                str(folder), device="cpu", compute_type=compute, intra_threads=threads
            )
            warm = ctranslate2.StorageView.from_array(np.ascontiguousarray(clips[0][0]))
            ct2.generate(warm, [clips[0][1]], beam_size=1)  # warm-up, not timed
            texts, total = [], 0.0
            for features, prefix, budget in clips:
                view = ctranslate2.StorageView.from_array(np.ascontiguousarray(features))
                t0 = time.perf_counter()
                res = ct2.generate(
                    view, [prefix], beam_size=1, max_length=min(448, budget),
                    suppress_blank=True, suppress_tokens=[-1],
                )[0]  # fmt: skip
                total += time.perf_counter() - t0
                texts.append(decode_text([t for t in res.sequences_ids[0] if t != eot]))
            out.append({"engine": f"CTranslate2 {compute}", "final_s": total, "texts": texts})
            del ct2
    return out
