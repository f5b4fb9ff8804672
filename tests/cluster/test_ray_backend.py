"""Inference replicas on Ray Serve behind the caption gateway, for real, on loopback.

A local Ray cluster (`ray start --head` on 127.0.0.1, 2 CPUs, no dashboard, its own ports and
temp folder), `streamcap serve --backend ray --replicas 2 --replica-threads 1` as the gateway,
the bundled base model in each replica, real speech published on three streams at real-time
pace. One test kills a replica (SIGKILL, mid-stream, while it decodes a final) and checks that
no final is lost or duplicated. Everything started here is stopped here: the head is killed by
its process group (never `ray stop`, which would kill every Ray process on the machine).

pytest itself never imports Ray: the cluster, the gateway and its bridge are subprocesses,
except in the exactness test, where this process holds a `RemoteWorker` whose Ray driver is its
own bridge subprocess.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serverkit import SR, Collector, ServeProcess, http_get, padded, recall

from streamcap.server.client import publish, ws_url

pytestmark = [
    pytest.mark.model,
    pytest.mark.ray,
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray[serve]"),
]


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """A one-node Ray cluster bound to 127.0.0.1: its GCS address. Nothing it started may
    outlive it."""
    from streamcap.cluster.local_head import start_head

    head = start_head(num_cpus=2)
    try:
        yield head.address
    finally:
        left = head.stop()
        assert not left, f"Ray processes outlived the head: {left}"


@pytest.fixture(scope="module")
def gateway(ray_head: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    record = tmp_path_factory.mktemp("record")
    srv = ServeProcess(
        "--backend", "ray", "--ray-address", ray_head, "--replicas", "2",
        "--replica-threads", "1", "--model", "base", "--no-admission", "--record", str(record),
        "--precision", "fp32",  # forced: the exactness test compares with an fp32 engine
        ready_timeout=400,
    )  # fmt: skip
    srv.record = record  # type: ignore[attr-defined]
    try:
        assert srv.proc.poll() is None, srv.text()
        yield srv
    finally:
        rc = srv.stop(timeout=90)
        assert rc == 0, srv.text()


def metrics(srv: ServeProcess) -> str:
    status, _, body = http_get(srv.url + "/metrics")
    assert status == 200
    return body


def metric(body: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in body.splitlines():
        m = re.match(rf"{name}(?:{{(.*)}})? (\S+)$", line)
        if m:
            have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(m.group(2))
    return total


def replica_pids(body: str) -> dict[str, int]:
    out = {}
    for line in body.splitlines():
        if line.startswith("streamcap_replica_info{"):
            have = dict(re.findall(r'(\w+)="([^"]*)"', line))
            if have.get("pid", "0") != "0":
                out[have["replica"]] = int(have["pid"])
    return out


#: three talks of real speech, with what each must contain
def talks(speech: dict[str, Any], suffix: str) -> dict[str, tuple[np.ndarray, str]]:
    gap = np.zeros(int(1.2 * SR), np.float32)

    def join(*ids: str) -> np.ndarray:
        parts: list[np.ndarray] = []
        for i in ids:
            parts += [speech[i], gap]
        return padded(np.concatenate(parts[:-1]))

    def said(*ids: str) -> str:
        from serverkit import words

        texts = {json.loads(x)["id"]: json.loads(x)["text"] for x in MANIFEST}
        return " ".join(" ".join(words(texts[i])) for i in ids)

    ids = {
        "talk-a": ("en_real_jfk", "en_real_praatio_mary"),
        "talk-b": ("en_real_librivox_0870", "en_real_librivox_0880"),
        "talk-c": ("en_real_goforward", "en_real_forever", "en_tts_piper_joe_s07"),
    }
    return {name + suffix: (join(*parts), said(*parts)) for name, parts in ids.items()}


DATA = Path(__file__).resolve().parents[1] / "data"
MANIFEST = (DATA / "manifest.jsonl").read_text().splitlines()


def publish_talks(srv: ServeProcess, plan: dict[str, tuple[np.ndarray, str]]) -> dict[str, Any]:
    """Publish every talk at once at real-time pace, each watched by a viewer; returns the
    viewers once every publisher got its normal close (after its last final)."""
    viewers = {name: Collector(srv.ws, name, token=None) for name in plan}
    time.sleep(0.3)
    errors: list[BaseException] = []

    def run(name: str, audio: np.ndarray) -> None:
        try:
            asyncio.run(publish(ws_url(srv.ws, "ingest", name), audio, SR))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(n, a)) for n, (a, _) in plan.items()]
    for t in threads:
        t.start()
    return {"viewers": viewers, "threads": threads, "errors": errors}


def finish(run: dict[str, Any], timeout: float = 240) -> dict[str, Collector]:
    for t in run["threads"]:
        t.join(timeout)
        assert not t.is_alive(), "a publisher did not finish"
    assert run["errors"] == []
    viewers: dict[str, Collector] = run["viewers"]
    time.sleep(0.5)
    for v in viewers.values():
        v.stop()
    return viewers


def check_finals(srv: ServeProcess, plan: dict[str, Any], viewers: dict[str, Collector]) -> None:
    """Every talk's words arrived, each final once, in order, and as recorded."""
    record: Path = srv.record  # type: ignore[attr-defined]
    for name, (_, said) in plan.items():
        finals = viewers[name].finals()
        text = " ".join(f["text"] for f in finals)
        assert recall(text, said) >= 0.8, (name, text, said)
        seqs = [e["seq"] for e in viewers[name].events]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), (name, seqs)
        segments = [f["segment"] for f in finals]
        assert len(segments) == len(set(segments)), (name, segments)  # no final twice
        recorded = [json.loads(x) for x in (record / f"{name}.jsonl").read_text().splitlines()]
        mine = [r for r in recorded if r["seq"] in set(seqs)]
        assert [r["text"] for r in mine] == [f["text"] for f in finals], name


def test_a_cluster_without_replicas_is_one_line(ray_head: str) -> None:
    """Attaching (no --replicas) to a cluster that runs no streamcap replicas: the gateway says
    so in one error line and exits (first in the module: before the gateway deploys them)."""
    proc = subprocess.run(
        [sys.executable, "-m", "streamcap.cli", "serve", "--port", "0", "--backend", "ray",
         "--ray-address", ray_head],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr
    assert errors[0].startswith("streamcap serve: error: no streamcap replicas (app 'streamcap')")


def test_three_streams_every_final_through_two_replicas(
    gateway: ServeProcess, speech: dict[str, Any]
) -> None:
    deadline = time.monotonic() + 180  # the gateway serves once one replica runs
    while (health := http_get(gateway.url + "/healthz"))[2].strip() != "ok (ray: 2/2 replicas)":
        assert time.monotonic() < deadline, health
        time.sleep(0.5)
    plan = talks(speech, "-1")
    viewers = finish(publish_talks(gateway, plan))
    check_finals(gateway, plan, viewers)
    body = metrics(gateway)
    assert metric(body, "streamcap_replicas_running") == 2
    assert metric(body, "streamcap_cluster_connected") == 1
    per_replica = {
        r: metric(body, "streamcap_replica_decodes_total", replica=r) for r in replica_pids(body)
    }
    assert len(per_replica) == 2 and all(n > 0 for n in per_replica.values()), per_replica
    assert metric(body, "streamcap_remote_retries_total", kind="final") == 0
    assert metric(body, "streamcap_remote_inflight") == 0


def test_a_replica_killed_mid_stream_loses_and_duplicates_no_final(
    gateway: ServeProcess, speech: dict[str, Any]
) -> None:
    plan = talks(speech, "-2")
    before = metric(metrics(gateway), "streamcap_remote_retries_total", kind="final")
    run = publish_talks(gateway, plan)
    victim = None
    deadline = time.monotonic() + 60
    while victim is None and time.monotonic() < deadline:
        body = metrics(gateway)
        for replica, pid in replica_pids(body).items():
            alive = metric(body, "streamcap_replica_alive", replica=replica) == 1
            if alive and metric(body, "streamcap_replica_inflight", replica=replica,
                                kind="final") >= 1:  # fmt: skip
                victim = pid
                break
        time.sleep(0.05)
    assert victim is not None, "no final was ever in flight on a known replica"
    os.kill(victim, signal.SIGKILL)
    viewers = finish(run)
    check_finals(gateway, plan, viewers)
    body = metrics(gateway)
    assert metric(body, "streamcap_remote_retries_total", kind="final") >= before + 1
    assert metric(body, "streamcap_remote_lost_total", reason="died") >= 1
    assert any("lost a final" in line and "resending" in line for line in gateway.lines), (
        gateway.text()
    )


def test_remote_finals_equal_plain_greedy_generate(gateway, ray_head, engine, speech) -> None:  # type: ignore[no-untyped-def]
    """Through the replicas (attached to the gateway's app), every final's tokens equal
    `generate` of the same model at the same precision, here on this process's engine."""
    from streamcap.cluster.remote import RemoteWorker
    from streamcap.cluster.transport import BridgeTransport
    from streamcap.cluster.wire import ClusterSpec, model_fingerprint
    from streamcap.core.live_config import LiveConfig
    from streamcap.decoding.reference import reference_decode
    from streamcap.models.card import ModelCard
    from streamcap.runtime.clock import RealClock
    from streamcap.runtime.replay import replay
    from streamcap.runtime.stream import LiveStream

    card = ModelCard.load("base")
    spec = ClusterSpec(address=ray_head)  # attach only: the gateway's replicas
    worker = RemoteWorker(card, BridgeTransport(spec, fingerprint=model_fingerprint(card.path)))
    worker.connect()
    worker.warm_up()
    worker.start()
    decodes: list[Any] = []
    stream = LiveStream("exact", worker, None, LiveConfig(language="en"), RealClock())
    stream.decode_observer = lambda job, out: decodes.append((job, out))
    gap = np.zeros(SR, np.float32)
    audio = np.concatenate([speech["en_real_librivox_0880"], gap, speech["en_real_praatio_mary"]])
    try:
        replay(stream, padded(audio), speed=2.0)
    finally:
        worker.stop(timeout=60)
    finals = [(j, o) for j, o in decodes if j.kind == "final" and o.result is not None]
    assert len(finals) >= 2
    assert worker.remote_status().replicas[0].precision == "fp32"  # the gateway's flag
    if engine.precision != "fp32":  # `auto` measured another encoder precision here
        from streamcap.runtime.engine import Engine

        engine = Engine("base", device="cpu", precision="fp32")
    for job, out in finals:
        enc = engine.encode(job.audio)
        ref, _ = reference_decode(engine.decoder, enc.enc, out.options, enc.duration_s)
        assert tuple(ref) == out.result.tokens


def test_serve_tooling_can_build_the_app() -> None:
    """`serve run streamcap.cluster.replica:build_app model=base ...` (docs/scaling.md): the
    builder's arguments become the deployment's options (checked without deploying)."""
    code = (
        "from streamcap.cluster.replica import build_app; "
        "app = build_app({'model': 'base', 'threads': '1', 'min_replicas': '1', "
        "'max_replicas': '3', 'inflight': '4'}); "
        "d = app._bound_deployment; c = d._deployment_config; "
        "print(d.name, c.max_ongoing_requests, c.autoscaling_config.max_replicas, "
        "d.ray_actor_options['num_cpus'], d.init_args[0].model)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["WhisperReplica", "4", "3", "1", "base"], run.stdout


def test_an_unreachable_cluster_is_one_line() -> None:
    from streamcap.cluster.local_head import free_port

    port = free_port()  # nothing listens there
    proc = subprocess.run(
        [sys.executable, "-m", "streamcap.cli", "serve", "--port", "0", "--backend", "ray",
         "--ray-address", f"127.0.0.1:{port}", "--replicas", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the Ray cluster" in lines[0], proc.stderr


def replicas_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamcap.cli", "replicas", *args],
                          capture_output=True, text=True, timeout=400)  # fmt: skip


def test_replicas_gone_then_back_finals_wait_or_fall_back(  # last: it replaces the replicas
    gateway: ServeProcess, ray_head: str, speech: dict[str, Any], tmp_path: Path
) -> None:
    """The replicas vanish mid-stream (`streamcap replicas --delete`) and come back
    (`streamcap replicas --replicas 1`): the gateway without a fallback keeps its stream open
    and its finals wait; one with ``--fallback local`` decodes here meanwhile. Both deliver
    every final once."""
    second = ServeProcess(
        "--backend", "ray", "--ray-address", ray_head, "--fallback", "local", "--model", "base",
        "--no-admission", "--record", str(tmp_path), ready_timeout=300,
    )  # fmt: skip
    second.record = tmp_path  # type: ignore[attr-defined]
    try:
        talk = talks(speech, "-3")
        waits = {k: v for k, v in talk.items() if k.startswith("talk-a")}
        falls = {k: v for k, v in talk.items() if k.startswith("talk-b")}
        run_waits, run_falls = publish_talks(gateway, waits), publish_talks(second, falls)
        time.sleep(3)
        gone = replicas_command("--ray-address", ray_head, "--delete")
        assert gone.returncode == 0 and "deleted" in gone.stderr, gone.stderr
        deadline = time.monotonic() + 60
        while metric(metrics(second), "streamcap_fallback_active") != 1:
            assert time.monotonic() < deadline, second.text()
            time.sleep(0.2)
        assert "degraded" in http_get(gateway.url + "/healthz")[2]
        assert http_get(gateway.url + "/readyz")[0] == 503
        back = replicas_command("--ray-address", ray_head, "--replicas", "1",
                                "--replica-threads", "1", "--model", "base")  # fmt: skip
        assert back.returncode == 0 and "1 running" in back.stdout, back.stdout + back.stderr
        check_finals(gateway, waits, finish(run_waits))
        check_finals(second, falls, finish(run_falls))
        assert metric(metrics(second), "streamcap_fallback_decodes_total") > 0
        assert metric(metrics(gateway), "streamcap_remote_final_timeouts_total") == 0
        shown = replicas_command("--ray-address", ray_head, "--status")
        assert shown.returncode == 0 and "1 running" in shown.stdout, shown.stdout
    finally:
        assert second.stop(timeout=90) == 0, second.text()
