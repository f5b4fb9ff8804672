"""Admission control and honest overload on a real server (issue 10): the bundled Whisper base
model, real speech, real sockets on 127.0.0.1.

The worker's meter is real: its prior is a final's cost measured by `warm_up` on this machine,
and the share of the worker a stream's finals may take is set low enough that this machine
carries exactly one stream, so the rule decides, not a mock.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from serverkit import PUB, SR, START, VIEW, Collector, base, http_get, padded, recall
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from streamcap.audio.pcm import float_to_pcm
from streamcap.core.capacity import CapacityConfig
from streamcap.server.client import PublishError, publish, ws_url
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def small_worker(engine: Any) -> Iterator[Any]:
    """A worker whose finals' budget holds one stream: after `warm_up` the prior of one stream
    is a final's cost / 5.7 s (about 0.16 here), far above a 1 % budget."""
    from streamcap.runtime.worker import InferenceWorker

    w = InferenceWorker(engine, capacity=CapacityConfig(max_finals_load=0.01))
    assert w.warm_up() > 0
    w.start()
    yield w
    w.stop()


@pytest.fixture
def server(small_worker: Any) -> Iterator[ServerThread]:
    config = ServerConfig(port=0, publish_token=PUB, view_token=VIEW, finish_timeout_s=60)
    with ServerThread(config, small_worker) as srv:
        yield srv


def metric(srv: ServerThread, name: str) -> float:
    status, _, body = http_get(srv.url("/metrics"))
    assert status == 200
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


def test_a_publisher_beyond_capacity_is_refused_1013_and_the_server_says_it_is_full(
    server: ServerThread, speech: dict[str, Any]
) -> None:
    status, _, body = http_get(server.url("/readyz"))
    assert (status, body.strip()) == (200, "ready")
    assert metric(server, "streamcap_accepting_streams") == 1.0
    engine = server.worker.engine
    info = f'streamcap_engine_info{{device="cpu",model="base",precision="{engine.precision}"}}'
    assert metric(server, info) == 1.0  # the precision in use (`--precision`)
    with connect(ws_url(base(server), "ingest", "first", token=PUB)) as first:
        first.send(json.dumps(START))
        assert json.loads(first.recv(timeout=10))["type"] == "ready"
        viewer = Collector(server, "first")
        status, _, body = http_get(server.url("/readyz"))
        assert status == 503 and body.startswith("full: ")
        assert http_get(server.url("/healthz"))[0] == 200  # alive, just full
        assert metric(server, "streamcap_accepting_streams") == 0.0
        assert metric(server, "streamcap_capacity_streams") == 0.0  # 1 % holds none of them
        with pytest.raises(PublishError) as info:
            url = ws_url(base(server), "ingest", "second", token=PUB)
            asyncio.run(publish(url, speech["en_real_praatio_mary"], SR))
        assert info.value.code == 1013 and "server is full" in str(info.value)
        # the admitted stream is unharmed: its speech becomes a final
        pcm = float_to_pcm(padded(speech["en_real_praatio_mary"]), "pcm_s16le")
        for i in range(0, len(pcm), 3200):
            first.send(pcm[i : i + 3200])
        first.send(json.dumps({"type": "stop"}))
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                first.recv(timeout=60)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
        assert viewer.wait_for(lambda c: c.finals(), 30)
        assert recall(viewer.text(), "mary rolled the barrel") >= 0.75
        viewer.stop()
    refused = metric(server, 'streamcap_connections_refused_total{reason="full"}')
    assert refused >= 1
    assert metric(server, 'streamcap_queue_wait_seconds_total{kind="final"}') >= 0
    assert metric(server, 'streamcap_decodes_total{kind="final"}') >= 1
    assert metric(server, 'streamcap_batches_total{size="1"}') >= 1  # batch sizes
    deadline = time.monotonic() + 10  # the first stream has gone: room again
    while time.monotonic() < deadline and http_get(server.url("/readyz"))[0] != 200:
        time.sleep(0.1)
    assert http_get(server.url("/readyz"))[0] == 200


def test_finals_not_out_in_time_are_not_claimed_out_and_still_reach_viewers(
    small_worker: Any, speech: dict[str, Any]
) -> None:
    """Bug (issue 10: "2 finals recorded but never received"): after `stop` the server waited
    `finish_timeout_s` for the last finals, then closed 1000 "stopped" (the promise that every
    final is out) although they were still decoding; clients that trusted it left early."""
    config = ServerConfig(port=0, publish_token=PUB, view_token=VIEW, finish_timeout_s=0.01)
    with ServerThread(config, small_worker) as srv:
        viewer = Collector(srv, "late")
        url = ws_url(base(srv), "ingest", "late", token=PUB)
        with pytest.raises(PublishError) as info:
            asyncio.run(
                publish(url, padded(speech["en_real_praatio_mary"], after=0.0), SR, realtime=False)
            )
        assert info.value.code == 1013 and "finals still decoding" in str(info.value)
        assert viewer.wait_for(lambda c: c.finals(), 60), "the late final never came"
        assert recall(viewer.text(), "mary rolled the barrel") >= 0.75
        viewer.stop()


@pytest.fixture
def one_room_server(engine: Any) -> Iterator[ServerThread]:
    """A fresh worker (nothing measured yet) whose prior holds one stream, as a 2-core CPU's
    default budget does for base: a final's cost / 5.7 s against a 1 % budget."""
    from streamcap.runtime.worker import InferenceWorker

    w = InferenceWorker(engine, capacity=CapacityConfig(max_finals_load=0.01))
    assert w.warm_up() > 0
    w.start()
    config = ServerConfig(port=0, publish_token=PUB, view_token=VIEW, max_speakers_per_room=3)
    try:
        with ServerThread(config, w) as srv:
            yield srv
    finally:
        w.stop()


def test_a_second_publisher_of_a_live_room_is_admitted_where_a_second_stream_is_not(
    one_room_server: ServerThread, speech: dict[str, Any]
) -> None:
    """Issue 20: a room's publishers take turns, so the room is one talk channel; a second
    member was refused `1013 server is full` on an idle machine. A second room still is
    refused, with a reason a person reads."""
    srv = one_room_server
    with connect(ws_url(base(srv), "ingest", "meeting", token=PUB, speaker="Ana")) as ana:
        ana.send(json.dumps(START))
        assert json.loads(ana.recv(timeout=10))["type"] == "ready"
        with connect(ws_url(base(srv), "ingest", "meeting", token=PUB, speaker="Ben")) as ben:
            ben.send(json.dumps(START))
            msg = json.loads(ben.recv(timeout=10))
            assert msg["type"] == "ready", msg
            with pytest.raises(PublishError) as info:
                url = ws_url(base(srv), "ingest", "other", token=PUB)
                asyncio.run(publish(url, speech["en_real_praatio_mary"], SR))
            assert info.value.code == 1013
            assert "one more would take" in info.value.reason
            assert "over the limit of 1 %" in info.value.reason
            # the room's members both caption
            viewer = Collector(srv, "meeting")
            pcm = float_to_pcm(padded(speech["en_real_praatio_mary"]), "pcm_s16le")
            for i in range(0, len(pcm), 3200):
                ben.send(pcm[i : i + 3200])
            ben.send(json.dumps({"type": "stop"}))
            assert viewer.wait_for(lambda c: c.finals(), 60)
            assert recall(viewer.text(), "mary rolled the barrel") >= 0.75
            viewer.stop()
