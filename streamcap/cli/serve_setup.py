"""What `streamcap serve` checks and builds before the model loads: its options
(`ServeCommand`: the `ServerConfig` of the flags, tokens from the flags, the config file or
the environment), the port, the TLS context, the record folder; and the lines it prints once
listening.

Everything here runs in a fraction of a second, so a bad flag, a port in use or an encrypted
TLS key costs a second, not a model load; ``--print-config`` runs the same flag checks
(`config_notes_from_args`), so a configuration it prints is one `serve` accepts.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from streamcap.cli.cluster import ClusterOptions
from streamcap.cli.common import UsageError
from streamcap.cli.live_options import (
    SPEAKERS_OFF,
    enrolments_from_args,
    guard_from_args,
    live_config,
    speakers_from_args,
    vad_from_args,
)
from streamcap.cli.model_options import ModelOptions, TaskOptions
from streamcap.cli.sink_options import sinks_from_args
from streamcap.core.capacity import CapacityConfig
from streamcap.core.live_config import LiveConfig
from streamcap.errors import UserError
from streamcap.server.config import ServerConfig
from streamcap.server.links import DEFAULT_STREAM, stream_links

if TYPE_CHECKING:
    import ssl

    from streamcap.server.app import CaptionServer

#: Each token flag's destination and the environment variable that stands in for it.
TOKEN_ENV = {
    "publish_token": "STREAMCAP_PUBLISH_TOKEN",
    "view_token": "STREAMCAP_VIEW_TOKEN",
    "metrics_token": "STREAMCAP_METRICS_TOKEN",
}
#: What a startup line shows in place of a token when stderr is not a terminal.
HIDDEN = "<hidden>"


@dataclass(frozen=True)
class ServeCommand:
    """Everything `streamcap serve` is asked, built once from its flags (`from_args`): the
    server's own configuration, the model and where it runs, what live streams are tuned by
    (their language comes with each stream: ``server.default_language`` when it does not)."""

    server: ServerConfig = field(default_factory=ServerConfig)
    model: ModelOptions = field(default_factory=ModelOptions)
    task: TaskOptions = field(default_factory=TaskOptions)
    live: LiveConfig = field(default_factory=LiveConfig)
    speakers: str = SPEAKERS_OFF
    enroll: tuple[tuple[str, str], ...] = ()  # --enroll NAME=FILE
    cluster: ClusterOptions = field(default_factory=ClusterOptions)
    capacity: CapacityConfig = field(default_factory=CapacityConfig)
    show_tokens: bool = False  # --show-tokens: in the startup URLs even off a terminal

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeCommand:
        """serve's flags, each checked (and the tokens' environment variables read)."""
        model = ModelOptions.from_args(args)
        server = server_config_from_args(args)
        cluster = ClusterOptions.from_args(args)
        task = TaskOptions.from_args(args)
        live = live_config(
            partial_interval=args.partial_interval,
            prompt=task.prompt,
            guard=guard_from_args(args),
            vad=vad_from_args(args),
        )
        return cls(
            server=server,
            model=model,
            task=task,
            live=live,
            speakers=speakers_from_args(args),
            enroll=enrolments_from_args(args),
            cluster=cluster,
            capacity=CapacityConfig(max_finals_load=args.max_load),
            show_tokens=args.show_tokens,
        )


def token_of(dest: str, value: str | None) -> str | None:
    """The token of ``--publish-token`` (``dest`` ``publish_token``) and its kin: the flag's
    (or the config file's) `value`, else its environment variable's, else None (that side
    open). An empty token is a UsageError: it looks set and silently left that side open."""
    flag = "--" + dest.replace("_", "-")
    if value is not None:
        if not value:
            raise UsageError(
                f"{flag} is empty: give a token, or leave {flag} out (no token: that side is open)"
            )
        return str(value)
    var = TOKEN_ENV[dest]
    value = os.environ.get(var)
    if value is not None and not value:
        raise UsageError(
            f"${var} is set but empty: give it a token, or unset it (no token: that side is open)"
        )
    return value


def server_config_from_args(args: argparse.Namespace, *, demo: bool = False) -> ServerConfig:
    """The `ServerConfig` for the flags (``demo``: `streamcap demo`'s few); its own checks
    (e.g. --tls-cert without --tls-key) are about flags, so they become usage errors (exit
    2), like a --port out of range.

    A guard set to 0 is off (None); the flags' type (`numbers.Number`) refuses a negative or
    NaN value, which used to switch a guard off as silently."""
    port = args.port
    if not 0 <= port <= 65535:  # getaddrinfo would wrap 99999 around, bind then fail
        raise UsageError(f"--port must be 0-65535 (0 = any free one), got {port}")
    try:
        if demo:
            return ServerConfig(
                host=args.host,
                port=args.port,
                record_dir=args.record,
                default_language=args.language,
            )
        return ServerConfig(
            host=args.host,
            port=args.port,
            publish_token=token_of("publish_token", args.publish_token),
            view_token=token_of("view_token", args.view_token),
            metrics_token=token_of("metrics_token", args.metrics_token),
            allowed_origins=tuple(args.allow_origin),
            allowed_hosts=tuple(args.allow_host),
            max_streams=args.max_streams,
            max_speakers_per_room=args.max_speakers_per_room,
            admission=args.admission,
            max_viewers=args.max_viewers,
            max_connections=args.max_connections,
            max_pending_per_address=args.max_pending_per_address,
            max_frame_bytes=args.max_frame_bytes,
            idle_timeout_s=args.idle_timeout,
            start_timeout_s=args.start_timeout,
            burst_s=args.burst or None,
            max_frame_rate=args.max_frame_rate or None,
            unknown_stream=args.unknown_stream,
            retain_streams=args.retain_streams,
            record_dir=args.record,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            web_dir=args.web_dir,
            default_language=args.language,
            sinks=sinks_from_args(args),
        )
    except ValueError as e:
        raise UsageError(str(e)) from None


def config_notes_from_args(args: argparse.Namespace) -> list[str]:
    """``serve --print-config``: serve's own checks of the server's and the cluster's flags
    (so a printed configuration is one serve accepts: no ``port = 70000``, no empty token),
    then the comments to print above it: where each token that is not written comes from."""
    from streamcap.cli.cluster import check_ray

    server_config_from_args(args)
    check_ray(ClusterOptions.from_args(args))
    given = {
        "publish_token": args.publish_token,
        "view_token": args.view_token,
        "metrics_token": args.metrics_token,
    }
    return [
        f"# {dest.replace('_', '-')}: from ${var} (not written here: it stays in the environment)"
        for dest, var in TOKEN_ENV.items()
        if given[dest] is None and os.environ.get(var)
    ] + [
        f"# {kind}:{stream}: its caption URL from the environment (not written here)"
        for kind, streams in (("youtube", args.youtube), ("zoom", args.zoom))
        for stream in streams or []
    ]


def check_start(config: ServerConfig) -> ServerConfig:
    """What would make the server fail once the model is loaded, checked before: the port,
    the TLS files, the record folder. Returns `config` with its TLS context built (once: the
    server uses it, so an encrypted key is never read twice)."""
    import dataclasses

    if config.port:
        check_port(config.host, config.port)
    if config.tls_cert is not None and config.tls_key is not None:
        ctx = tls_context(config.tls_cert, config.tls_key)
        config = dataclasses.replace(config, ssl_context=ctx)
    if config.record_dir is not None:
        try:
            config.record_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create --record {config.record_dir}: {e.strerror}") from None
    return config


class _EncryptedKeyError(Exception):
    """OpenSSL asked for the key's passphrase (the password callback was called)."""


def _no_passphrase() -> bytes:
    raise _EncryptedKeyError


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The server's TLS context for ``--tls-cert``/``--tls-key``; UserError (one line) when
    they cannot be used. An encrypted key is refused, never prompted for: OpenSSL's own prompt
    (on /dev/tty) would stop a server at start, twice, and without a terminal it failed with
    "Invalid argument"."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    what = f"cannot use --tls-cert {cert} / --tls-key {key}"
    try:
        ctx.load_cert_chain(cert, key, password=_no_passphrase)
    except _EncryptedKeyError:
        raise UserError(
            f"{what}: the key is encrypted (it needs a passphrase, and a server cannot stop "
            f"to ask for one): decrypt it once with `openssl pkey -in {key} -out "
            "key-plain.pem` and keep that file readable by this user only"
        ) from None
    except (OSError, ssl.SSLError) as e:
        raise UserError(f"{what}: {getattr(e, 'strerror', None) or e}") from None
    return ctx


def check_port(host: str, port: int) -> None:
    """UserError if ``host:port`` cannot be bound. The probe binds as the server will (with
    SO_REUSEADDR, so a port left in TIME_WAIT by a previous run is fine) and closes at once."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as e:
        raise UserError(f"cannot listen on --host {host!r}: {e.strerror}") from None
    for family, kind, proto, _name, addr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                with contextlib.suppress(OSError):
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(addr)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    raise UserError(
                        f"port {port} on {host} is already in use (another streamcap serve?): "
                        "pick another with --port, or --port 0 for any free one"
                    ) from None
                raise UserError(f"cannot listen on {host}:{port}: {e.strerror}") from None


def startup_lines(server: CaptionServer, show_tokens: bool = True) -> list[str]:
    """What `serve` prints once listening: every URL a person needs, with the tokens where
    the URL is useless without them, but only when ``show_tokens`` (stderr is a terminal, or
    ``--show-tokens``): under systemd or docker stderr is the log, and tokens never go there;
    the URLs then say ``<hidden>`` and the last line says how to see them."""
    cfg = server.config

    def q(**params: str | None) -> str:
        hide = not show_tokens
        return "&".join(
            f"{k}={HIDDEN if hide and k in ('token', 'view_token') else quote(v, safe='')}"
            for k, v in params.items()
            if v
        )

    view, pub = cfg.view_token, cfg.publish_token
    # a working pair for one stream: the overlay shows what the mic page publishes
    links = stream_links(
        server.url(""), DEFAULT_STREAM, publish_token=pub, view_token=view,
        hidden=None if show_tokens else HIDDEN,
    )  # fmt: skip
    lines = [
        f"streamcap serving on {server.url('/')}",
        f"  mic page   {links.mic}",
        f"  overlay    {links.overlay}",
        f"  transcript {links.transcript}",
        f"  ingest     {server.url('/ingest', websocket=True)}?{q(stream='ID')}"
        + ("  (publish token required)" if pub else ""),
        f"  captions   {server.url('/captions', websocket=True)}?{q(stream='ID', since='0')}"
        + ("  (view token required)" if view else ""),
        f"  metrics    {server.url('/metrics')}"
        + ("  (metrics token required)" if cfg.metrics_token else ""),
    ]
    if cfg.sinks:  # their names only: a sink's URL is a secret
        lines.insert(-1, f"  sinks      {', '.join(s.label for s in cfg.sinks)}")
    if (pub or view) and not show_tokens:
        lines.append(
            f"  (tokens shown as {HIDDEN}: stderr is not a terminal, and it may be a log; "
            "--show-tokens prints them)"
        )
    return lines
