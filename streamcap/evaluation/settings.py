"""``--set NAME=VALUE`` on the harness's command lines: configurations with overrides.

One syntax for every script that takes it (scripts/eval_stream.py, eval_meeting.py,
codec_agreement.py, policy_replay.py's model variants): a value reads as None, a bool, an int,
a float, or else the text itself.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from streamcap.core.live_config import LiveConfig, split_language
from streamcap.core.load_shed import LoadShedConfig
from streamcap.core.policy_config import PolicyConfig
from streamcap.core.segmenter import SegmenterConfig
from streamcap.core.speakers import SpeakerConfig


def parse_value(text: str) -> Any:
    """``none``/``null`` -> None, ``true``/``false`` -> bool, then int, float, else the text."""
    low = text.lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def build_config(language: str | None, settings: list[str]) -> LiveConfig:
    """LiveConfig with ``name=value`` overrides (policy fields by name or ``policy.name``,
    segmenter fields as ``segmenter.name``, load shedding's as ``load_shed.name``)."""
    live: dict[str, Any] = {}
    policy: dict[str, Any] = {}
    segmenter: dict[str, Any] = {}
    shed: dict[str, Any] = {}
    shed_names = {f.name for f in fields(LoadShedConfig)}
    policy_names = {f.name for f in fields(PolicyConfig)}
    live_names = {f.name for f in fields(LiveConfig)}
    segmenter_names = {f.name for f in fields(SegmenterConfig)}
    for item in settings:
        name, _, raw = item.partition("=")
        name = name.strip().removeprefix("policy.")
        field = name.removeprefix("segmenter.")
        if field != name and field in segmenter_names:
            segmenter[field] = parse_value(raw)
        elif name.startswith("load_shed.") and name.removeprefix("load_shed.") in shed_names:
            shed[name.removeprefix("load_shed.")] = parse_value(raw)
        elif name in policy_names:
            policy[name] = parse_value(raw)
        elif name in live_names:
            live[name] = parse_value(raw)
        else:
            raise SystemExit(f"unknown setting {name!r}")
    # "auto" (or "none"): detect once per stream and keep it; "auto-each": every utterance
    code, lock = split_language(None if language in (None, "auto", "none") else language)
    base = LiveConfig(language=code, lock_language=lock)
    return replace(
        base,
        policy=replace(base.policy, **policy),
        segmenter=replace(base.segmenter, **segmenter),
        load_shed=replace(base.load_shed, **shed),
        **live,
    )


def speaker_config(settings: list[str]) -> SpeakerConfig:
    """SpeakerConfig with ``name=value`` overrides."""
    names = {f.name for f in fields(SpeakerConfig)}
    values: dict[str, Any] = {}
    for item in settings:
        name, _, raw = item.partition("=")
        if name.strip() not in names:
            raise SystemExit(f"unknown speaker setting {name!r}")
        values[name.strip()] = parse_value(raw)
    return replace(SpeakerConfig(), **values)
