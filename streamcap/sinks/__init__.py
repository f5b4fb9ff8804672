"""Caption sinks: a stream's captions sent where its audience is, besides the viewers —
YouTube Live and Zoom (their caption URLs), OBS (its websocket), or one registered by you.

The port (`base.CaptionSink`: a name, whether it wants partials, ``deliver``, ``aclose``), the
driver that gives each sink its own task and bounded queue (`runner.SinkRunner`), and the kinds
by name (`registry.register_sink`; `serve --sink KIND:STREAM`). Import from the defining
module; this face is for users (names resolved on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcap._face import lazy_face

if TYPE_CHECKING:  # what the names are, for type checkers; imported on first use at run time
    from streamcap.sinks.base import CaptionSink as CaptionSink
    from streamcap.sinks.base import SinkError as SinkError
    from streamcap.sinks.base import SinkSpec as SinkSpec
    from streamcap.sinks.http_post import Answer as Answer
    from streamcap.sinks.http_post import HttpPoster as HttpPoster
    from streamcap.sinks.http_post import RetryPolicy as RetryPolicy
    from streamcap.sinks.http_post import check_http_url as check_http_url
    from streamcap.sinks.http_post import spoken_text as spoken_text
    from streamcap.sinks.http_post import with_query as with_query
    from streamcap.sinks.obs import ObsClient as ObsClient
    from streamcap.sinks.obs import ObsSink as ObsSink
    from streamcap.sinks.obs import check_obs_url as check_obs_url
    from streamcap.sinks.obs import obs_auth as obs_auth
    from streamcap.sinks.obs import obs_password as obs_password
    from streamcap.sinks.registry import SinkFactory as SinkFactory
    from streamcap.sinks.registry import SinkKind as SinkKind
    from streamcap.sinks.registry import env_names as env_names
    from streamcap.sinks.registry import make_sink as make_sink
    from streamcap.sinks.registry import parse_sink as parse_sink
    from streamcap.sinks.registry import register_sink as register_sink
    from streamcap.sinks.registry import sink_kind as sink_kind
    from streamcap.sinks.registry import sink_kinds as sink_kinds
    from streamcap.sinks.registry import sinks_from as sinks_from
    from streamcap.sinks.runner import SinkFigures as SinkFigures
    from streamcap.sinks.runner import SinkRunner as SinkRunner
    from streamcap.sinks.youtube import StampClock as StampClock
    from streamcap.sinks.youtube import YouTubeSink as YouTubeSink
    from streamcap.sinks.youtube import youtube_body as youtube_body
    from streamcap.sinks.youtube import youtube_time as youtube_time
    from streamcap.sinks.zoom import ZoomSink as ZoomSink
    from streamcap.sinks.zoom import seq_url as seq_url

#: public name -> the module of this package that defines it
_EXPORTS = {
    "CaptionSink": "base",
    "SinkError": "base",
    "SinkSpec": "base",
    "Answer": "http_post",
    "HttpPoster": "http_post",
    "RetryPolicy": "http_post",
    "check_http_url": "http_post",
    "spoken_text": "http_post",
    "with_query": "http_post",
    "ObsClient": "obs",
    "ObsSink": "obs",
    "check_obs_url": "obs",
    "obs_auth": "obs",
    "obs_password": "obs",
    "SinkFactory": "registry",
    "SinkKind": "registry",
    "env_names": "registry",
    "make_sink": "registry",
    "parse_sink": "registry",
    "register_sink": "registry",
    "sink_kind": "registry",
    "sink_kinds": "registry",
    "sinks_from": "registry",
    "SinkFigures": "runner",
    "SinkRunner": "runner",
    "StampClock": "youtube",
    "YouTubeSink": "youtube",
    "youtube_body": "youtube",
    "youtube_time": "youtube",
    "ZoomSink": "zoom",
    "seq_url": "zoom",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
