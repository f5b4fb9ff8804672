"""``streamcap_enrolled_voices{stream="ID"}``: how many voices each stream has enrolled over HTTP
(`voices.py`), read at each scrape of ``/metrics`` (`metrics.py` holds the server's other
figures; this collector is registered on its registry by `voices.Voices`).

A series per stream, where `metrics.py` keeps stream ids out of its labels (they come from
clients and would grow without bound): only a stream with a voice enrolled has one, enrolling
takes the publish token (or this machine), and the streams that may hold voices are bounded
(`voices.MAX_STREAMS`). The count, never the names: no other metric names a speaker. Voices
``--enroll`` gives every stream are not counted (the command line says them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class VoiceCounts(Collector):
    """The gauge above, from ``counts`` (stream -> voices enrolled), called at each scrape."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "streamcap_enrolled_voices",
            "Voices enrolled in a stream over HTTP (POST /streams/ID/voices), per stream",
            labels=["stream"],
        )
        for stream, n in sorted(self._counts().items()):
            family.add_metric([stream], n)
        yield family
