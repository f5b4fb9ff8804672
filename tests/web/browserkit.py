"""Real headless Chromium for the pages' tests: Debian's /usr/bin/chromium driven by Playwright
(never ``playwright install``), one launcher for every page test (`browser`, and `launch` for
those that need a microphone), so the flags that make it quiet and let it record live in one
place (facts: ../shared/TESTING.md).

The microphone is one of three (`launch`'s ``mic``): a WAV file that Chromium's fake capture
device plays once (then silence: ``%noloop``), Chromium's fake device itself (a beep), or the
machine's default device (the PulseAudio virtual microphone of tests/pulse_mic.py, reached
through ``PULSE_SERVER`` in ``env``). Each gets the microphone allowed without asking, as after
an earlier "Allow".
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pytest

CHROMIUM = "/usr/bin/chromium"
#: no sandbox (none in a container), no GPU, nothing fetched or synced, no first-run screens
QUIET = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def need_chromium() -> Any:
    """Playwright's sync API, or the test skipped (no chromium, or no playwright)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    return pytest.importorskip("playwright.sync_api")


def browser(pw: Any, *args: str) -> Any:
    """A headless Chromium without a microphone (``pw``: a running ``sync_playwright()``), with
    the `QUIET` flags and ``args``; its pages are fresh contexts. The caller closes it."""
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[*QUIET, *args])


def launch(
    pw: Any,
    profile: Path,
    mic: Path | Literal["fake", "default"],
    autoplay: bool = False,
    viewport: tuple[int, int] | None = None,
    env: Mapping[str, str] | None = None,
) -> Any:
    """A persistent Chromium context (``pw``: a running ``sync_playwright()``) with a fresh
    profile in ``profile`` (Playwright refuses ``--user-data-dir`` in the flags), recording
    from ``mic`` (the module docstring); ``autoplay``: audio may play without a click (a page
    that plays what it hears). The caller closes it."""
    args = ["--use-fake-ui-for-media-stream"]  # the microphone allowed
    if mic != "default":
        args.append("--use-fake-device-for-media-stream")
    if isinstance(mic, Path):
        args.append(f"--use-file-for-fake-audio-capture={mic}%noloop")
    if autoplay:
        args.append("--autoplay-policy=no-user-gesture-required")
    options: dict[str, Any] = {}
    if viewport is not None:
        options["viewport"] = {"width": viewport[0], "height": viewport[1]}
    if env is not None:
        options["env"] = dict(env)
    return pw.chromium.launch_persistent_context(
        str(profile),
        executable_path=CHROMIUM,
        headless=True,
        args=[*args, *QUIET],
        **options,
    )
