"""`--precision auto` on a CPU: the encoder's precision chosen by timing it here, once.

CPU flags do not say which precision is fastest: on an Intel CPU with AVX512-BF16 and no AMX
the bf16 encoder of base took 0.75 s per 30 s window against 0.59 s in fp32 (and int8 0.45 s),
with AMX bf16 took 0.29 s against 0.71 s; an AMD EPYC with AVX512-BF16 ran bf16 faster. So at
the first load of a model on a machine, each candidate encoder (fp32; bf16 where oneDNN runs
it natively; int8 where its accuracy was measured, `INT8_AUTO_MODELS`) encodes one 30 s window
of silence (a warm-up, then three rounds taking each in turn, the best time of each), and
the fastest wins if it beats fp32 by `MARGIN` (timings are noisy; fp32 is the reference
precision). The result is cached in the cache folder per machine (CPU model and flags), torch
version, thread count and model, with the load average it was measured under, and
`streamcap models` shows it with the timings. Delete the file to measure again.

The decoder stays fp32 on a CPU (one-token steps gain nothing from bf16, see
`loader.choose_placement`), so the choice only moves the encoder; exactness is unaffected
(speculative output is checked against plain greedy `generate` on the same encoder).
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamcap.models.registry import cache_dir

#: A candidate must be this much faster than fp32 to be chosen (noise guard).
MARGIN = 0.10
#: Models whose int8 encoder `auto` may choose: its WER within +0.3 points of fp32 on the dev
#: clips (`streamcap bench --precision fp32,int8`; README "Precision"). Others: fp32 or bf16.
INT8_AUTO_MODELS: frozenset[str] = frozenset()
CACHE_FILE = "precision.json"


@dataclass(frozen=True)
class EncoderChoice:
    """What `auto` runs the encoder at, and the timings it was chosen from (seconds)."""

    precision: str  # "fp32", "bf16" or "int8"
    timings: Mapping[str, float]
    reason: str
    quiet: bool = True  # timed on a quiet machine (else provisional: `BUSY_LOAD_PER_CPU`)


def choose(timings: Mapping[str, float], margin: float = MARGIN) -> EncoderChoice:
    """The fastest candidate if it beats fp32 by `margin`, else fp32 (pure: tests drive it)."""
    ref = timings["fp32"]
    best = min(timings, key=lambda k: timings[k])
    shown = ", ".join(f"{k} {_seconds(v)}" for k, v in timings.items())
    if best != "fp32" and timings[best] <= ref * (1.0 - margin):
        return EncoderChoice(best, dict(timings), f"measured here: {shown}")
    return EncoderChoice("fp32", dict(timings), f"measured here: {shown}; fp32 kept")


def _seconds(v: float) -> str:
    """A timing as read: ``0.39 s``, or ``7.9 ms`` below a tenth of a second (a screen call)."""
    return f"{v:.2f} s" if v >= 0.1 else f"{v * 1e3:.1f} ms"


def machine_key(model: str, threads: int) -> str:
    """Which cached choice applies: CPU model and the flags that matter, torch, threads, model."""
    import torch

    from streamcap.decoding.screen import cpu_info

    name, flags = cpu_info()
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")
    have = "+".join(f for f in wanted if f in flags)
    return f"{name or 'cpu'}|{have}|torch {torch.__version__}|{threads} threads|{model}"


def cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def all_cached() -> dict[str, EncoderChoice]:
    """Every cached choice by key (for `streamcap models`)."""
    try:
        data = json.loads(cache_path().read_text(encoding="utf-8"))
        return {
            k: EncoderChoice(
                str(v["precision"]), dict(v["timings"]), str(v["reason"]), _was_quiet(v)
            )
            for k, v in data.items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _was_quiet(record: Mapping[str, Any]) -> bool:
    """A record's own flag; older records, without one, by the load average they noted."""
    if "quiet" in record:
        return bool(record["quiet"])
    load = record.get("load_average")
    return load is None or float(load) <= BUSY_LOAD_PER_CPU * (os.cpu_count() or 1)


def cached(key: str) -> EncoderChoice | None:
    """The cached choice for `key`, unless it was timed on a busy machine and this one is
    quiet now (then it is timed again)."""
    hit = all_cached().get(key)
    if hit is not None and not hit.quiet and machine_is_quiet():
        return None
    return hit


#: A timing taken while the machine's load average is above this share of its CPUs is cached
#: as provisional: other work skews the candidates unequally (seen here: bf16 1.57 s against
#: fp32 1.32 s at load 1.6 on 2 cores, 0.30 against 0.59 s quiet), so the first load that
#: finds the machine quiet measures again; a machine that is never quiet keeps it.
BUSY_LOAD_PER_CPU = 0.5


def machine_is_quiet() -> bool:
    """Whether a timing taken now may be cached (`BUSY_LOAD_PER_CPU`)."""
    if not hasattr(os, "getloadavg"):
        return True
    return os.getloadavg()[0] <= BUSY_LOAD_PER_CPU * (os.cpu_count() or 1)


def store(key: str, choice: EncoderChoice) -> None:
    """Add `choice` to the cache file (best effort: a read-only cache just measures again),
    marked provisional when the machine is busy now (`BUSY_LOAD_PER_CPU`)."""
    path = cache_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data[key] = {
        "precision": choice.precision,
        "timings": choice.timings,
        "reason": choice.reason,
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "quiet": machine_is_quiet(),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass


def _window(encoder: Any, dtype: Any) -> Any:
    import torch

    weight = getattr(encoder.conv1, "weight", None)
    n_mels = int(weight.shape[1]) if weight is not None else 80
    frames = 2 * int(encoder.embed_positions.weight.shape[0])
    return torch.zeros(1, n_mels, frames, dtype=dtype)


def measure(model: Any, candidates: tuple[str, ...], rounds: int = 3) -> dict[str, float]:
    """Time the fp32 encoder of `model` and a copy of it at each other candidate: a warm-up
    each, then `rounds` rounds taking each in turn (so a load that comes and goes on the
    machine falls on all of them alike), the best time of each, in seconds."""
    import torch

    from streamcap.models.quantize import int8_encoder

    encoder = model.model.encoder
    runs: dict[str, tuple[Any, Any]] = {"fp32": (encoder, _window(encoder, torch.float32))}
    for name in candidates:
        if name == "bf16":
            runs["bf16"] = (
                copy.deepcopy(encoder).to(torch.bfloat16),
                _window(encoder, torch.bfloat16),
            )
        elif name == "int8":
            runs["int8"] = (int8_encoder(copy.deepcopy(encoder)), _window(encoder, torch.float32))
    best = dict.fromkeys(runs, float("inf"))
    with torch.inference_mode():
        for enc, x in runs.values():
            enc(x)
        for _ in range(rounds):
            for name, (enc, x) in runs.items():
                t0 = time.perf_counter()
                enc(x)
                best[name] = min(best[name], time.perf_counter() - t0)
    return best


def candidates_for(model_name: str, bf16_native: bool) -> tuple[str, ...]:
    """The encoders `auto` may pick for `model_name` here, besides fp32."""
    out: list[str] = []
    if bf16_native:
        out.append("bf16")
    if model_name in INT8_AUTO_MODELS:
        out.append("int8")
    return tuple(out)


def encoder_choice(
    model_name: str,
    model: Any,
    *,
    bf16_native: bool,
    timer: Callable[[Any, tuple[str, ...]], dict[str, float]] = measure,
) -> EncoderChoice:
    """The cached choice for this machine and model, or a fresh measurement (then cached)."""
    import torch

    key = machine_key(model_name, torch.get_num_threads())
    hit = cached(key)
    if hit is not None:
        return hit
    cands = candidates_for(model_name, bf16_native)
    if not cands:
        return EncoderChoice("fp32", {}, "no other encoder precision runs well here")
    choice = choose(timer(model, cands))
    store(key, choice)
    return choice
