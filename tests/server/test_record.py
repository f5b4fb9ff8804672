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
    assert back.log.dropped_seq == 7  # t0..t6 (seqs 1..7) are only on disk now


def test_finals_dropped_from_memory_are_read_back(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    clog = CaptionLog("w", epoch="e4", max_finals=3)
    sent = _run(rec, clog, [("final", i, f"t{i}.") for i in range(10)])
    assert [c.text for c in clog.finals()] == ["t7.", "t8.", "t9."]
    assert clog.dropped_seq == sent[6].seq
    back = rec.finals("w", "e4", 2, clog.dropped_seq)
    assert [c.text for c in back] == ["t2.", "t3.", "t4.", "t5.", "t6."]
    assert rec.finals("w", "another-epoch", 0, 100) == []
    # a line still being written (no newline yet) is left out, not reported as broken
    with open(tmp_path / "w.jsonl", "a", encoding="utf-8") as f:
        f.write('{"type": "final", "stream": "w", "se')
    assert [c.text for c in rec.finals("w", "e4", 0, 2)] == ["t0.", "t1."]


def test_a_renumbered_recording_reads_back_with_its_new_numbers(tmp_path: Path) -> None:
    """A recording made before epochs (every run restarted at seq 1) is renumbered at load;
    the finals that stay on disk read back under the same numbers, then the new ones follow."""
    with open(tmp_path / "old.jsonl", "w", encoding="utf-8") as f:
        for run in range(2):
            for i in range(4):  # seqs 1..4 twice, no epoch
                text = f"r{run}t{i}."
                cap = Caption("final", "old", i + 1, i, text, i * 2.0, i * 2.0 + 1, 4, 0.0)
                f.write(json.dumps(cap.to_dict()) + "\n")
    rec = Recorder(tmp_path)
    back = rec.load("old", max_finals=3)
    assert back is not None
    clog = back.log
    assert [c.seq for c in clog.finals()] == [6, 7, 8] and clog.dropped_seq == 5
    on_disk = rec.finals("old", clog.epoch, 0, clog.dropped_seq)
    assert [(c.seq, c.text) for c in on_disk] == [
        (1, "r0t0."), (2, "r0t1."), (3, "r0t2."), (4, "r0t3."), (5, "r1t0."),
    ]  # fmt: skip
    sent = _run(rec, clog, [("final", 9, "new.")])
    assert [(c.seq, c.text) for c in rec.finals("old", clog.epoch, 4, sent[0].seq)] == [
        (5, "r1t0."), (6, "r1t1."), (7, "r1t2."), (8, "r1t3."), (sent[0].seq, "new."),
    ]  # fmt: skip
