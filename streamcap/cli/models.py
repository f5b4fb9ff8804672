"""`streamcap models`: the bundled models, their state, and where they live.

Paths are printed whole on lines of their own (a table column would cut them to the terminal's
width, and a cut path cannot be copied). The table is compact (no borders, short states) so it
fits 80 columns unwrapped, and rich sizes it to the terminal when there is one.
"""

from __future__ import annotations

import argparse

from streamcap.errors import UserError

#: `registry.describe`'s states, shortened for the table (the note under it says the rest).
SHORT_STATE = {"installed (prepared on first use)": "not prepared yet"}


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument(
        "--prepare",
        nargs="*",
        metavar="NAME",
        help="convert these bundled models (no NAME: all) into the cache now "
        "(default: each on its first use)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The command's edge: ``--prepare`` (None: not given; empty: every bundled model)."""
    return models(None if args.prepare is None else tuple(args.prepare))


def models(prepare: tuple[str, ...] | None) -> int:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from streamcap.models.registry import BUNDLED, cache_dir, describe, prepare_bundled

    names = [] if prepare is None else prepare or tuple(BUNDLED)
    for name in names:
        if name not in BUNDLED:
            raise UserError(f"unknown bundled model {name!r} (bundled: {', '.join(BUNDLED)})")
        print(f"{name}: {prepare_bundled(name)}")
    rows = describe()
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("model", no_wrap=True)
    table.add_column("description")
    table.add_column("state", no_wrap=True)
    for row in rows:
        table.add_row(row["name"], row["description"], SHORT_STATE.get(row["state"], row["state"]))
    Console(highlight=False).print(table)
    print("(a model not prepared yet is converted on its first use, or now with --prepare)")
    print(f"cache: {cache_dir()}")
    for row in rows:
        print(f"  {row['name']}: {row['path']}")
    print(precision_line())
    print("Any Hugging Face Whisper checkpoint also works (needs network), or a local folder:")
    print("  --model openai/whisper-large-v3 --assistant distil-whisper/distil-large-v3")
    return 0


def precision_line() -> str:
    """What ``--device auto --precision auto`` picks on this machine, and why: on a CPU the
    encoder's precision measured at the first load of each model (`models.precision_probe`)."""
    from streamcap.models.precision_probe import all_cached, cache_path

    tail = "--precision auto|fp32|bf16|int8|fp16 chooses"
    device = "cpu"  # auto on a CPU: the encoder's precision is measured at load (the loader's)
    if not cpu_only():
        from streamcap.models.loader import choose_placement

        placement = choose_placement("auto", "auto")
        if not placement.measured:
            why = f" ({placement.reason})" if placement.reason else ""
            return f"precision here: {placement.precision} on {placement.device}{why}; {tail}"
        device = placement.device
    lines = [f"precision here (auto on {device}): the encoder's, measured at load:"]
    for key, choice in all_cached().items():
        where, model = key.rsplit("|", 1)
        if model == "screen":
            continue  # the first screen probe's (rows after silence): stale, never reused
        if model == "screen2":  # `runtime.screen_probe`: the decoder's vocabulary screen
            where, model = where.rsplit("|", 1)
            state = "on" if choice.precision == "screen" else "off (full fp32 projection)"
            lines.append(f"  {model}, vocabulary screen: {state} ({choice.reason})")
        else:
            lines.append(f"  {model}: {choice.precision} encoder, fp32 decoder ({choice.reason})")
        lines.append(f"    for {where}")
    if len(lines) == 1:
        lines.append("  not measured yet: the first load of a model measures it")
    lines.append(f"  cached in {cache_path()} (delete it to measure again)")
    lines.append(f"  {tail}")
    return "\n".join(lines)


#: What a GPU that torch could use leaves on a machine: NVIDIA's driver, ROCm's kernel driver,
#: WSL's GPU paravirtualisation.
GPU_NODES = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")


def cpu_only() -> bool:
    """True when no GPU can be used here: no GPU driver's device node, and torch not imported
    yet (once it is, asking it costs nothing and its answer is the one that counts). Importing
    torch only to hear "no CUDA" was most of `streamcap models`' 2.5 s."""
    import os
    import sys

    return "torch" not in sys.modules and not any(os.path.exists(p) for p in GPU_NODES)
