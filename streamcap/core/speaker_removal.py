"""Taking an enrolled voice back out of a meeting (issue 37, item 4: ``DELETE
/streams/ID/voices?name=Mary``, and a sample replaced, `runtime.enrol.replace_late`), so that
later finals no longer get its name while every other label stays as it was. Pure (numpy only).
Its own module beside `core.speakers` (the tracker: `SpeakerTracker.remove`).

A labeller knows a name in one of two ways (`runtime.enrol.enrol_late`), and each is undone
differently, because labels are positions: speaker k is "Speaker N" where N counts the unnamed
speakers before k (`SpeakerTracker.label`).

- A speaker the tracker holds under that name (`SpeakerTracker.enrol`: a sample given before
  its voice was heard) is removed: named speakers are not counted, so no other label changes;
  the indices after it move down by one, and so do the labeller's late names and the tracker's
  ``previous`` (which forgets it). Its centroid goes with it (the sample's and whatever of the
  meeting it learnt): the voice, heard again, is a voice not heard yet and founds the next
  "Speaker N" (or joins the nearest speaker when the meeting has the most it labels).
  Unnamed, it could not keep its place: it would take a number and renumber the speakers
  after it.
- A speaker the labeller numbered before its sample came (``late_names``) loses the name and
  is its number again ("Speaker 2"), its centroid kept: it was the meeting's voice first.

Past captions keep the name they were given: a label is decided once (a rename of the name
still renames them, `core.speaker_names`).
"""

from __future__ import annotations

from streamcap.core.speakers import SpeakerTracker

__all__ = ["forget_voice"]


def forget_voice(tracker: SpeakerTracker, late_names: dict[int, str], name: str) -> str | None:
    """Take ``name`` out of a labeller's meeting (``tracker``, and ``late_names``, the names
    it gave speakers heard before their enrolment; both changed in place, under the
    labeller's lock). Returns the label the voice's next finals get: its number again
    ("Speaker 2") for a late name, "" when its speaker is gone (the module docstring says
    why); None when the meeting has no voice of that name (nothing changes)."""
    for k, late in late_names.items():
        if late == name:
            del late_names[k]
            return tracker.label(k)
    found = [k for k in range(len(tracker)) if k not in late_names and tracker.label(k) == name]
    if not found:
        return None
    k = found[0]
    tracker.remove(k)
    moved = {j - (j > k): n for j, n in late_names.items()}
    late_names.clear()
    late_names.update(moved)
    return ""
