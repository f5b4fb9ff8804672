"""Cross-talk in a room: which captions are another participant's voice heard by this microphone.

Two laptops on one table, or a call on loudspeakers: every voice reaches every microphone of a
room, so each publisher's pipeline captions the others too, more quietly, and the room showed
every sentence twice, once under the wrong name (issue 37, item 2: 16 cues for 8 sentences at
-12 dB). A room's publishers are on one clock (`server.hub`): one sentence heard by two
microphones gives two captions at the same time with the same words, one markedly louder, from
the speaker's own microphone; the quieter one is a copy (*bleed*), left out.

**The rule** (`CrossTalk._judge`): caption X of publisher P is a copy of publisher Q's speech
when Q's captions overlapping X cover at least `min_cover` of X's time (give or take `slack_s`:
a room's microphones are not exactly in step), were heard at least `margin_db` louder
(`speech_level_db` of the audio each microphone heard: `CaptionEvent.level_db`), and say the
same words (`similarity`, forgiving a copy misheard: "as not" for "ask not"). All three: two
people really talking at once, each into their own microphone, are both kept (their words
differ, and each is the louder in their own microphone).

**When** a caption is decided: at once when it is evidently its publisher's own voice (louder
than a same-worded caption of another publisher, or at the level that publisher's own speech has
measured: the median of its last shown finals, before it has any the room's, less `margin_db`)
or evidently a copy. One that could be a copy (quieter than that, or before any level is known)
waits for the other microphones' captions, but only while one of them could still send a caption
of its time: not once it has captioned as far as its end (each publisher's captions come in time
order, so nothing of that time is still on the way), nor while its microphone heard no speech
over enough of it (`quiet`, what its segmenter says: no utterance there, nor one that may still
start there; the part of the caption out of its captions' reach, `slack_s` included, is more
than 1 - `min_cover`), so a publisher's first turn while the others are silent shows at once,
partials included (held, each was replaced by a newer one before it went out: issue 37, item 2).
A microphone whose report is just short of that is looked at again when its audio should have
passed it. Otherwise: `hold_s`, or, while that publisher is speaking or was shortly before, as
long as this room's captions of one sentence have been seen to come apart (`pace`), never longer
than `max_hold_s`. A caption whose utterance goes on in its publisher's next caption waits on
(the other microphone may send that sentence whole, at its end). What has waited that long goes
out: nothing is lost on a guess. A publisher's captions go out in the order they came.

Partials follow the same rule, so a copy's words do not show under the wrong name; a copy whose
partial was shown before it was identified is cleared (`Released.verdict` "clear": sent empty,
as the policy clears a partial). Pure logic: the caller (`server.rooms`) gives the times and
the microphones' quiet spans.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from streamcap.core.captions import CaptionType
from streamcap.core.crosstalk_measures import similarity

__all__ = ["CrossTalk", "CrossTalkConfig", "Heard", "Released"]

T = TypeVar("T")
#: A caption that starts where a final of its publisher ended continues that utterance (the
#: policy sent a sentence of it as a final): another microphone may caption it as one.
_SAME_UTTERANCE_S = 0.05
#: Where the levels of every publisher's shown finals are kept together (`CrossTalk._own`).
_ROOM = object()
#: A caption that waits only for a quiet microphone's report to pass its time is looked at
#: again this long (s) after that microphone's audio should have (`CrossTalk._wait_s`).
_RECHECK_S = 0.1
#: What becomes of a caption: shown as it is, shown empty (it clears a partial of it on
#: screen: a copy identified after its partial was shown), or left out.
Verdict = Literal["show", "clear", "drop"]


@dataclass(frozen=True)
class CrossTalkConfig:
    """The rule's thresholds (module docstring), set between what two real browser microphones
    hearing each other gave (tests/web/test_room_crosstalk.py, 53 pairs of captions of one
    sentence from both microphones, and two people talking at once); see docs/meetings.md."""

    #: A copy is at least this much quieter than the voice it copies (dB): copies measured
    #: 5.9-6.4 dB under their voice at -6 dB, 11.2-13.1 at -12 dB; two people talking at once,
    #: each into their own microphone, 0.0 apart.
    margin_db: float = 3.0
    #: Share of the shorter caption's words the other must say (`similarity`): copies 0.62-1.0
    #: (a quieter copy is misheard); two different sentences of those clips at most 0.375.
    min_similarity: float = 0.5
    #: Word spellings this alike count as the same word (`similarity`).
    word_match: float = 0.75
    #: Share of a copy's time that the other publisher's captions must cover.
    min_cover: float = 0.5
    #: How far apart the room's microphones may be in time (s).
    slack_s: float = 0.5
    #: How long a caption that could be a copy waits for the captions of another publisher who
    #: has not captioned that far (s) ...
    hold_s: float = 1.0
    #: ... or, when that publisher is speaking, was within `active_s` before it or has said
    #: nothing yet (its pipeline may be behind: its captions of that time on the way), `pace`
    #: times the widest gap seen between the arrivals of two captions of one sentence in this
    #: room (before one is seen, `lag_share` of how late the caption came), at most
    #: `max_hold_s`. A worker far behind (finals 30-50 s late) decoded two microphones' finals
    #: of one sentence up to 7.3 s apart; one keeping up, within a second.
    active_s: float = 10.0
    pace: float = 2.0
    lag_share: float = 0.5
    max_hold_s: float = 10.0
    #: How long (room seconds) a final remains evidence against later captions.
    memory_s: float = 30.0
    #: A publisher's own level: the median of its last this many shown finals.
    own_finals: int = 5


@dataclass(frozen=True)
class Heard:
    """One caption as the check sees it: whose microphone, what, when on the room's clock, and
    how loud that microphone heard it (None: not measured; such a caption is never judged)."""

    publisher: Hashable
    type: CaptionType
    segment: int
    text: str
    start: float
    end: float
    level_db: float | None = None
    #: how late it came: the time from the end of its speech to the caption (`latency_ms`)
    lag_s: float = 0.0


@dataclass(frozen=True)
class Released(Generic[T]):
    """A caption decided: what the caller gave with it, the verdict, and how long it waited."""

    payload: T
    heard: Heard
    verdict: Verdict
    held_s: float


@dataclass(eq=False)
class _Item(Generic[T]):
    heard: Heard
    payload: T
    arrived: float  # when it came
    since: float  # when its wait began (again when its utterance went on in another caption)
    first: float  # when it or a partial it replaced came: `max_hold_s` counts from here
    copy: bool = False  # judged a copy: evidence that the other is own, never that it is a copy


class CrossTalk(Generic[T]):
    """One room's cross-talk check (module docstring). `offer` each caption as it comes; call
    `expire` at `due`; `flush` when the room ends. Each returns the captions decided, in order."""

    def __init__(self, config: CrossTalkConfig | None = None) -> None:
        self.config = config or CrossTalkConfig()
        self._reset()

    def _reset(self) -> None:
        self._evidence: list[_Item[T]] = []  # open partials and recent finals, every publisher
        self._waiting: dict[Hashable, list[_Item[T]]] = {}  # per publisher, in order
        self._on_screen: set[tuple[Hashable, int]] = set()  # (publisher, segment) partial shown
        self._own: dict[Hashable, deque[float]] = {}  # levels of each one's shown finals
        self._reach: dict[Hashable, float] = {}  # how far (room clock) each has captioned
        self._gaps: deque[float] = deque(maxlen=8)  # seconds between twins' arrivals
        self._present: frozenset[Hashable] = frozenset()  # the room's publishers now
        self._quiet: dict[Hashable, tuple[float, float]] = {}  # where each heard no speech
        self._now = 0.0  # the callers' clock at the latest call
        self._latest = 0.0  # the room clock's latest caption end

    def due(self) -> float | None:
        """When (the callers' clock) the first waiting caption must be decided; None: none."""
        heads = [q[0] for q in self._waiting.values() if q]
        last = self.config.max_hold_s
        return min((min(x.since + self._wait_s(x), x.first + last) for x in heads), default=None)

    def offer(
        self,
        heard: Heard,
        payload: T,
        now: float,
        present: Iterable[Hashable] | None = None,
        quiet: Mapping[Hashable, tuple[float, float]] | None = None,
    ) -> list[Released[T]]:
        """A new caption; `present`: the room's publishers now; `quiet`: where (room clock,
        from, to) each one's microphone heard no speech and no utterance can start, as its
        segmenter says now (None: as last said; a publisher left out: not known)."""
        self._tell(now, present, quiet)
        item = _Item(heard, payload, now, now, now)
        who, seg = heard.publisher, heard.segment
        queue = self._waiting.setdefault(who, [])
        for i, old in enumerate(queue):  # a newer caption of a waiting partial's segment
            if old.heard.segment == seg and old.heard.type == "partial":
                item.first = old.first  # (a final waits anew: it is what the others' are to match)
                item.since = old.since if heard.type == "partial" else now
                del queue[i]
                break
        for old in queue:  # its utterance goes on: the others' caption of it ends later
            if old.heard.type == "final" and abs(heard.start - old.heard.end) <= _SAME_UTTERANCE_S:
                old.since = now
        self._evidence = [x for x in self._evidence if not _replaced(x.heard, heard)]
        if heard.text.strip():
            self._reach[who] = max(self._reach.get(who, heard.end), heard.end)
            if heard.level_db is not None:
                self._evidence.append(item)
                self._latest = max(self._latest, heard.end)
                self._forget()
        queue.append(item)
        return self._settle(now, force=False)

    def expire(
        self,
        now: float,
        present: Iterable[Hashable] | None = None,
        quiet: Mapping[Hashable, tuple[float, float]] | None = None,
    ) -> list[Released[T]]:
        """Decide what has waited long enough (and what it held up, or what a quiet
        microphone's report now clears); `present`, `quiet`: as for `offer`."""
        self._tell(now, present, quiet)
        return self._settle(now, force=False)

    def flush(self, now: float) -> list[Released[T]]:
        """Decide everything now (the room has ended: no more evidence will come)."""
        self._now = now
        return self._settle(now, force=True)

    def _tell(
        self,
        now: float,
        present: Iterable[Hashable] | None,
        quiet: Mapping[Hashable, tuple[float, float]] | None,
    ) -> None:
        self._now = now
        if present is not None:
            self._present = frozenset(present)
        if quiet is not None:
            self._quiet = dict(quiet)

    def drain(self) -> list[T]:
        """Everything waiting, undecided, in order, and the check starts over (what a caller
        falls back on when a decision failed: a caption is never lost to the check)."""
        out = [x.payload for q in self._waiting.values() for x in q]
        self._reset()
        return out

    # ------------------------------------------------------------------ decisions

    def _settle(self, now: float, force: bool) -> list[Released[T]]:
        out: list[Released[T]] = []
        progress = True
        while progress:  # one decision may settle another (a copy found, a level learnt)
            progress = False
            for who, queue in list(self._waiting.items()):
                while queue:
                    head = queue[0]
                    done = self._decide(head, now, force)
                    if done is None:
                        break
                    queue.pop(0)
                    out.append(done)
                    progress = True
                if not queue:
                    del self._waiting[who]
        return out

    def _decide(self, item: _Item[T], now: float, force: bool) -> Released[T] | None:
        h = item.heard
        key = (h.publisher, h.segment)
        verdict: Verdict = "show"
        if not h.text.strip():  # clears its segment's partial: only if one is on screen
            verdict = "show" if key in self._on_screen else "drop"
        elif h.level_db is not None:
            judged = self._judge(item)
            if judged == "copy":
                item.copy = True
                verdict = "clear" if key in self._on_screen else "drop"
            elif judged is None and not force and self._may_be_copy(h) and self._waits(item, now):
                return None
        if h.type == "partial" and verdict == "show" and h.text.strip():
            self._on_screen.add(key)
        else:
            self._on_screen.discard(key)
        if h.type == "final" and verdict == "show" and h.level_db is not None and h.text.strip():
            for who in (h.publisher, _ROOM):
                levels = self._own.setdefault(who, deque(maxlen=self.config.own_finals))
                levels.append(h.level_db)
        return Released(item.payload, h, verdict, now - item.arrived)

    def _waits(self, item: _Item[T], now: float) -> bool:
        if now - item.first >= self.config.max_hold_s - 1e-9:
            return False
        return now - item.since < self._wait_s(item) - 1e-9

    def _wait_s(self, item: _Item[T]) -> float:
        """How long (from `item.since`) its caption may wait for the others' captions: 0 when
        every other publisher of the room has captioned past it (their captions come in time
        order: nothing of its time is still on the way) or heard no speech over it (`_unheard`:
        it cannot have said it); while one that is speaking, or was shortly before
        (`active_s`), or has captioned nothing yet, has not: as long as its pipeline may be
        behind (`_paced_s`); else `hold_s`. A microphone quiet up to shortly before the
        caption's end is looked at again when its audio should have passed it."""
        h = item.heard
        cfg = self.config
        wait = 0.0
        for other in self._present - {h.publisher}:
            span = self._quiet.get(other)
            left = self._unheard(h, span) if span is not None else None
            if left is not None and left <= 0:
                continue
            reach = self._reach.get(other)
            # an open utterance of its that may reach into h: its final is to come
            speaking = any(
                x.heard.publisher == other
                and x.heard.type == "partial"
                and x.heard.start <= h.end + cfg.slack_s
                for x in self._evidence
            )
            if reach is not None and reach >= h.end - cfg.slack_s and not speaking:
                continue
            active = speaking or reach is None or reach >= h.start - cfg.active_s
            longest = self._paced_s(h) if active else cfg.hold_s
            if left is not None:  # its report of this time is on the way, as its audio is
                longest = min(longest, self._now - item.since + left + _RECHECK_S)
            wait = max(wait, longest)
        return wait

    def _unheard(self, h: Heard, span: tuple[float, float]) -> float | None:
        """How much further (room seconds) a publisher's quiet `span` (from, to: its
        microphone heard no speech there, and no utterance of its can start there) must reach
        before none of its captions can cover `min_cover` of `h`'s time (0: already; None: its
        quiet cannot tell). Its captions end by `from` or start from `to`: with `slack_s`, the
        part of `h` within (from + slack, to - slack) is out of their reach."""
        cfg = self.config
        lo = max(h.start, span[0] + cfg.slack_s)  # what it said before its quiet reaches to here
        silent_to = lo + (1.0 - cfg.min_cover) * (h.end - h.start) + 1e-3
        if silent_to > h.end:
            return None
        return max(0.0, silent_to + cfg.slack_s - span[1])

    def _paced_s(self, h: Heard) -> float:
        """How long to wait for a pipeline that is behind: `pace` times the widest gap seen
        between two twins' arrivals in this room (the worker's pace: one final decode apart);
        before any was seen, `lag_share` of how late `h` itself came (a worker far behind
        decodes the two microphones' captions far apart); `hold_s` at least, `max_hold_s` at
        most."""
        cfg = self.config
        seen = cfg.pace * max(self._gaps) if self._gaps else cfg.lag_share * h.lag_s
        return min(cfg.max_hold_s, max(cfg.hold_s, seen))

    def _may_be_copy(self, h: Heard) -> bool:
        """Quieter than its publisher's own speech has measured (before that, the room's
        speech; before any, it may be)."""
        own = self._own.get(h.publisher) or self._own.get(_ROOM)
        assert h.level_db is not None
        return not own or h.level_db < statistics.median(own) - self.config.margin_db

    def _judge(self, item: _Item[T]) -> Literal["copy", "own"] | None:
        """ "copy": another publisher said it louder; "own": this one is the louder of two
        captions that say it; None: no other caption says it (yet). A twin found tells how far
        apart this room's twins come (`_gaps`)."""
        h = item.heard
        cfg = self.config
        assert h.level_db is not None
        by: dict[Hashable, list[_Item[T]]] = {}
        for x in self._evidence:
            o = x.heard
            if o.publisher != h.publisher and _overlap(h, o, cfg.slack_s) > 0:
                by.setdefault(o.publisher, []).append(x)
        own = False
        for items in by.values():
            other = [x.heard for x in items]
            if _cover(h, other, cfg.slack_s) < cfg.min_cover:
                continue
            said = " ".join(o.text for o in sorted(other, key=lambda o: o.start))
            if similarity(h.text, said, cfg.word_match) < cfg.min_similarity:
                continue
            # a copy is evidence that this is the voice it copies, never that this is a copy
            voices = [x.heard.level_db for x in items if not x.copy]
            levels = [o.level_db for o in other if o.level_db is not None]
            copy = any(v is not None and v >= h.level_db + cfg.margin_db for v in voices)
            if copy or h.level_db >= max(levels) + cfg.margin_db:
                self._gaps.append(abs(item.arrived - max(x.arrived for x in items)))
            if copy:
                return "copy"
            own = own or h.level_db >= max(levels) + cfg.margin_db
        return "own" if own else None

    def _forget(self) -> None:
        """Finals older than `memory_s` on the room's clock are no evidence any more."""
        horizon = self._latest - self.config.memory_s
        if any(x.heard.end < horizon for x in self._evidence):
            self._evidence = [x for x in self._evidence if x.heard.end >= horizon]


def _replaced(old: Heard, new: Heard) -> bool:
    """`old` is the partial of the segment `new` continues (a newer partial or its final)."""
    same = old.publisher == new.publisher and old.segment == new.segment
    return same and old.type == "partial"


def _overlap(a: Heard, b: Heard, slack: float) -> float:
    return min(a.end, b.end + slack) - max(a.start, b.start - slack)


def _cover(h: Heard, others: list[Heard], slack: float) -> float:
    """Share of `h`'s time that `others` (each widened by `slack`) cover."""
    spans = sorted((max(h.start, o.start - slack), min(h.end, o.end + slack)) for o in others)
    covered, reach = 0.0, h.start
    for a, b in spans:
        a = max(a, reach)
        if b > a:
            covered += b - a
            reach = b
    length = h.end - h.start
    return covered / length if length > 0 else (1.0 if spans else 0.0)
