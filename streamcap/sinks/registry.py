"""The caption sinks by name, and how `serve` makes one per stream from its flags, its config
file and its environment.

A kind of sink is a name, a factory that makes a sink for one stream (`SinkFactory`, from a
`SinkSpec`: kind, stream, target, options), one line about it for ``--help``, and where its
target may come from: the environment variable named by ``target_env`` (``$NAME`` for every
stream, ``$NAME_<STREAM>`` for one: ``STREAMCAP_YOUTUBE_URL_MAIN`` for stream ``main``), or the
``sink`` list of the config file (``sink = ["youtube:main=https://..."]``). A kind whose target
is a secret (``secret_target``: a YouTube or Zoom caption URL carries the key that lets anyone
post captions to that broadcast) refuses it on the command line, where every user of the
machine can read it (``ps``) and shells keep it in their history; the config file and the
environment are the places for it. A spec's repr shows its kind and stream only.

A new kind is one `register_sink` call (in this file's table for one of streamcap's own), and
`serve --sink KIND:STREAM[=TARGET]` takes it; see docs/broadcast.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .base import CaptionSink, SinkSpec

__all__ = [
    "SinkFactory",
    "SinkKind",
    "env_names",
    "make_sink",
    "parse_sink",
    "register_sink",
    "sink_kind",
    "sink_kinds",
    "sinks_from",
]

#: A stream id, as the server takes them (`server.request.STREAM_ID_RE`).
_STREAM_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")
_KIND_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")


#: Makes a sink for one spec (no I/O yet: a sink connects when it first delivers).
SinkFactory = Callable[[SinkSpec], CaptionSink]


@dataclass(frozen=True)
class SinkKind:
    name: str
    factory: SinkFactory
    about: str
    #: the environment variable its target may come from (``$VAR_<STREAM>``, then ``$VAR``)
    target_env: str | None = None
    #: the target is a secret: never taken from the command line, never logged
    secret_target: bool = True
    #: checks a target; raises ValueError with a message that does not quote the target
    check_target: Callable[[str], None] | None = None


_REGISTRY: dict[str, SinkKind] = {}


def register_sink(
    name: str,
    factory: SinkFactory,
    *,
    about: str,
    target_env: str | None = None,
    secret_target: bool = True,
    check_target: Callable[[str], None] | None = None,
) -> None:
    """Make ``name`` a kind of caption sink (a later registration replaces an earlier)."""
    if not _KIND_RE.fullmatch(name):
        raise ValueError(f"a sink's name is lower-case letters, digits, - and _: {name!r}")
    _REGISTRY[name] = SinkKind(name, factory, about, target_env, secret_target, check_target)


def sink_kinds() -> list[SinkKind]:
    """Every kind, by name."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def sink_kind(name: str) -> SinkKind:
    """The kind called ``name``; ValueError naming the kinds there are."""
    kind = _REGISTRY.get(name)
    if kind is None:
        raise ValueError(f"no caption sink {name!r}; there are: {', '.join(sorted(_REGISTRY))}")
    return kind


def make_sink(spec: SinkSpec) -> CaptionSink:
    """A sink for ``spec`` by its kind's factory."""
    return sink_kind(spec.kind).factory(spec)


def parse_sink(text: str) -> tuple[str, str, str | None]:
    """``KIND:STREAM[=TARGET]`` as (kind, stream, target or None); ValueError (without the
    target in it) for anything else."""
    head, eq, target = text.partition("=")
    kind, colon, stream = head.partition(":")
    if not colon or not _KIND_RE.fullmatch(kind) or not _STREAM_RE.fullmatch(stream):
        raise ValueError(
            f"a sink is KIND:STREAM or KIND:STREAM=TARGET (e.g. youtube:main), not {head!r}"
        )
    sink_kind(kind)
    return kind, stream, (target if eq else None)


def env_names(kind: SinkKind, stream: str) -> tuple[str, ...]:
    """The environment variables a stream's target may come from, the stream's own first."""
    if kind.target_env is None:
        return ()
    own = kind.target_env + "_" + re.sub(r"[^A-Z0-9]", "_", stream.upper())
    return (own, kind.target_env)


def sinks_from(
    items: Iterable[str],
    environ: Mapping[str, str],
    *,
    command_line: bool,
    options: Mapping[str, tuple[tuple[str, str], ...]] | None = None,
) -> tuple[SinkSpec, ...]:
    """The specs of ``items`` (``KIND:STREAM[=TARGET]`` each), every target found and
    checked: given in the item (refused for a secret one when ``command_line``: the config
    file's list is not), else from the kind's environment variables. ``options``: by kind,
    what each of its specs gets. ValueError (one line, never quoting a target) for a kind
    that does not exist, a target missing or refused, one sink given twice, or two sinks
    posting to one target (each would number its posts from 1: the service would take the
    second's as retries of the first's)."""
    specs: list[SinkSpec] = []
    for item in items:
        name, stream, target = parse_sink(item)
        kind = sink_kind(name)
        where = "given"
        if target is not None and kind.secret_target and command_line:
            hint = f"${kind.target_env}" if kind.target_env else "the config file"
            raise ValueError(
                f"{name}:{stream}: the {name} target is a secret, and the command line shows "
                f"it to every user of this machine: set {hint} or put it in the config file "
                f'(sink = ["{name}:{stream}=..."])'
            )
        if target is None:
            for var in env_names(kind, stream):
                if environ.get(var):
                    target, where = environ[var], f"${var}"
                    break
        if not target:
            places = " or ".join(f"${v}" for v in env_names(kind, stream))
            raise ValueError(
                f"{name}:{stream}: no target: set {places or 'it'} "
                f'or give it in the config file (sink = ["{name}:{stream}=..."])'
            )
        if kind.check_target is not None:
            try:
                kind.check_target(target)
            except ValueError as e:
                raise ValueError(f"{name}:{stream}: the target ({where}) {e}") from None
        spec = SinkSpec(name, stream, target, (options or {}).get(name, ()))
        for other in specs:
            if other.label == spec.label:
                raise ValueError(f"{spec.label} is given twice")
            if other.kind == spec.kind and other.target == spec.target:
                raise ValueError(
                    f"{other.label} and {spec.label} have the same target: give each stream "
                    f"its own (${env_names(kind, stream)[0]} for {stream})"
                    if kind.target_env
                    else f"{other.label} and {spec.label} have the same target"
                )
        specs.append(spec)
    return tuple(specs)


# --------------------------------------------------------------------------- streamcap's own
# (imported here, at the end: their modules import the port, `base`, never this file)

from .http_post import check_http_url  # noqa: E402
from .obs import ObsSink, check_obs_url  # noqa: E402
from .youtube import YouTubeSink  # noqa: E402
from .zoom import ZoomSink  # noqa: E402

register_sink(
    "youtube",
    YouTubeSink,
    about="YouTube Live closed captions: finals POSTed to the broadcast's caption ingestion URL",
    target_env="STREAMCAP_YOUTUBE_URL",
    check_target=check_http_url,
)
register_sink(
    "zoom",
    ZoomSink,
    about="Zoom closed captions: finals POSTed to the meeting's caption URL (its API token)",
    target_env="STREAMCAP_ZOOM_URL",
    check_target=check_http_url,
)
register_sink(
    "obs",
    ObsSink,
    about="OBS Studio's own closed captions (CEA-608 in its stream) through obs-websocket "
    "at ws://HOST:PORT; its password from $STREAMCAP_OBS_PASSWORD or the config file",
    target_env="STREAMCAP_OBS_URL",
    secret_target=False,
    check_target=check_obs_url,
)
