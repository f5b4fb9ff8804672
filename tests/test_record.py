"""`--record DIR` persistence: finals appended, seqs reserved ahead, the log read back."""

from __future__ import annotations

import json
from pathlib import Path

from streamcap.core.captions import Caption, CaptionLog
from streamcap.server.record import Recorder


def _run(rec: Recorder, clog: CaptionLog, events: list[tuple[str, int, str]]) -> list[Caption]:
    out = []
    for kind, segment, text in events:
        cap = clog.emit(kind, segment, text, segment * 2.0, segment * 2.0 + 1.5)  # type: ignore[arg-type]
        rec.before_send(clog)
        if kind == "final":
            rec.write(cap)
        out.append(cap)
    return out


def test_reload_continues_seq_epoch_segments_and_time(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, block=4)
    clog = CaptionLog("room", epoch="e1")
    events = [("partial", 0, "a"), ("final", 0, "A."), ("partial", 1, "b"),
              ("partial", 1, "b c"), ("final", 1, "B c."), ("partial", 2, "d")]  # fmt: skip
    sent = _run(rec, clog, events)
    # Killed here (no clean close): a viewer may have seen seq 6, a partial nobody recorded.
    back = Recorder(tmp_path).load("room", max_finals=100)
    assert back is not None
    assert back.log.epoch == "e1"
    assert [c.text for c in back.log.finals()] == ["A.", "B c."]
    assert back.log.last_seq >= sent[-1].seq  # never hands out a seq already seen
    assert back.log.last_seq - sent[-1].seq <= 4  # at most one block above
    assert back.next_segment == 2 and back.audio_s == 3.5
    nxt = back.log.emit("final", 5, "E.", 10.0, 11.0)
    assert nxt.seq > sent[-1].seq and nxt.epoch == "e1"


def test_clean_close_reserves_exactly_what_was_issued(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, block=256)
    clog = CaptionLog("s", epoch="e2")
    sent = _run(rec, clog, [("partial", 0, "x"), ("final", 0, "X.")])
    rec.close([clog])
    back = Recorder(tmp_path).load("s", max_finals=10)
    assert back is not None and back.log.last_seq == sent[-1].seq == 2
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    assert [json.loads(x)["seq"] for x in lines] == [2]
    assert json.loads(lines[0])["epoch"] == "e2"


def test_old_recordings_with_repeating_seqs_are_renumbered(tmp_path: Path) -> None:
    runs = []
    for run in range(2):  # two server runs before epochs existed: seq restarts at 1 each time
        for seq, text in ((1, f"r{run} one."), (2, f"r{run} two.")):
            cap = Caption("final", "old", seq, seq, text, seq, seq + 1, len(text), 100.0)
            runs.append(cap.to_json())
    (tmp_path / "old.jsonl").write_text("\n".join(runs) + "\n{broken\n")
    back = Recorder(tmp_path).load("old", max_finals=100)
    assert back is not None
    assert [c.seq for c in back.log.finals()] == [1, 2, 3, 4]
    assert back.log.epoch and back.log.last_seq == 4
    assert {c.epoch for c in back.log.finals()} == {back.log.epoch}


def test_missing_or_unsafe_ids_load_nothing(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    assert rec.load("nothing", max_finals=10) is None
    assert rec.load("../etc/passwd", max_finals=10) is None
    assert rec.load(".hidden", max_finals=10) is None
    (tmp_path / "bad.seq.json").write_text("not json")
    (tmp_path / "bad.jsonl").write_text("")
    back = rec.load("bad", max_finals=10)
    assert back is not None and back.log.last_seq == 0 and back.log.epoch


def test_max_finals_keeps_the_latest(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    clog = CaptionLog("m", epoch="e3")
    _run(rec, clog, [("final", i, f"t{i}.") for i in range(10)])
    back = Recorder(tmp_path).load("m", max_finals=3)
    assert back is not None
    assert [c.text for c in back.log.finals()] == ["t7.", "t8.", "t9."]
    assert back.next_segment == 10
