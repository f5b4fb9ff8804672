"""The caption policy's states and their transitions, as tables (like h11's `_state.py`). Pure.

Three small machines hold everything the policy does in order; the rest of its state is data
(audio, words, times, the hypothesis). Each change goes through `StateMachine.fire`
(`core.state_machine`), which looks the (state, event) pair up in its table and raises
`TransitionError` for a pair the table does not hold, so that a rule broken shows where it
breaks, not as a caption lost later.

A *window* (`WINDOW_TRANSITIONS`) is the audio of one utterance, or of its rest after a commit:

    OPEN --EARLY_FINAL--> EARLY_FINAL --EARLY_RESULT--> EARLY_FINAL_READY
    EARLY_FINAL, EARLY_FINAL_READY --VOICE, COMMIT_CUT--> OPEN   (the early final is void)
    OPEN, EARLY_FINAL --CLOSE--> CLOSED --FINAL_RESULT--> DONE
    EARLY_FINAL_READY --CLOSE--> DONE                            (its result is the final)

- OPEN: audio comes in; partials are decoded, and their agreed words committed.
- EARLY_FINAL: a pause may be beginning (`PolicyConfig.early_final_s` of unvoiced audio): the
  window's exact final decode started on the audio so far, and no partial is asked for.
  EARLY_FINAL_READY: that decode's result has come; it is kept until the pause is confirmed.
- VOICE (speech resumed after the decoded audio) or COMMIT_CUT (committed words cut the window
  the early final decoded) void the early final: the window is OPEN again.
- CLOSE (the pause lasted `pause_final_s`, the utterance ended, the window reached
  `max_window_s`, the stream ended): no more audio. An OPEN window's final decode is requested;
  an early final under way becomes the final (CLOSED until it comes); one that has come is
  the final at once (DONE).

A window's *partial* (`PARTIAL_TRANSITIONS`): one partial decode in flight at a time (IDLE,
PENDING); the policy asks for one only while the window is OPEN, and its result still drafts a
window closed in the meantime. The stream's *speech* (`SPEECH_TRANSITIONS`): the segmenter's
contract, `SpeechStart`, `SpeechAudio`..., `SpeechEnd`; `finish` ends the stream in either state.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from streamcap.core.state_machine import StateMachine


class WindowState(enum.Enum):
    OPEN = "open"
    EARLY_FINAL = "early_final"
    EARLY_FINAL_READY = "early_final_ready"
    CLOSED = "closed"
    DONE = "done"


class WindowEvent(enum.Enum):
    EARLY_FINAL = "early_final"  # a pause began: the exact final decode starts
    EARLY_RESULT = "early_result"  # that decode's result came (None: the worker dropped it)
    VOICE = "voice"  # voice after the audio the early final decoded
    COMMIT_CUT = "commit_cut"  # committed words cut the window's audio
    CLOSE = "close"  # no more audio for this window
    FINAL_RESULT = "final_result"  # the closed window's final decode came (or was dropped)


_W, _WE = WindowState, WindowEvent

WINDOW_TRANSITIONS: Mapping[WindowState, Mapping[WindowEvent, WindowState]] = {
    _W.OPEN: {
        _WE.EARLY_FINAL: _W.EARLY_FINAL,
        _WE.CLOSE: _W.CLOSED,
    },
    _W.EARLY_FINAL: {
        _WE.EARLY_RESULT: _W.EARLY_FINAL_READY,
        _WE.VOICE: _W.OPEN,
        _WE.COMMIT_CUT: _W.OPEN,
        _WE.CLOSE: _W.CLOSED,
    },
    _W.EARLY_FINAL_READY: {
        _WE.VOICE: _W.OPEN,
        _WE.COMMIT_CUT: _W.OPEN,
        _WE.CLOSE: _W.DONE,
    },
    _W.CLOSED: {
        _WE.FINAL_RESULT: _W.DONE,
    },
    _W.DONE: {},
}


class PartialState(enum.Enum):
    IDLE = "idle"
    PENDING = "pending"


class PartialEvent(enum.Enum):
    REQUEST = "request"
    RESULT = "result"  # its result came (None too: the worker dropped it)


PARTIAL_TRANSITIONS: Mapping[PartialState, Mapping[PartialEvent, PartialState]] = {
    PartialState.IDLE: {PartialEvent.REQUEST: PartialState.PENDING},
    PartialState.PENDING: {PartialEvent.RESULT: PartialState.IDLE},
}


class SpeechState(enum.Enum):
    SILENCE = "silence"
    SPEECH = "speech"


class SpeechEvent(enum.Enum):
    START = "start"  # SpeechStart
    AUDIO = "audio"  # SpeechAudio
    END = "end"  # SpeechEnd
    FINISH = "finish"  # CaptionPolicy.finish: the end of the stream


SPEECH_TRANSITIONS: Mapping[SpeechState, Mapping[SpeechEvent, SpeechState]] = {
    SpeechState.SILENCE: {
        SpeechEvent.START: SpeechState.SPEECH,
        SpeechEvent.FINISH: SpeechState.SILENCE,
    },
    SpeechState.SPEECH: {
        SpeechEvent.AUDIO: SpeechState.SPEECH,
        SpeechEvent.END: SpeechState.SILENCE,
        SpeechEvent.FINISH: SpeechState.SILENCE,
    },
}


def window_machine() -> StateMachine[WindowState, WindowEvent]:
    return StateMachine(WINDOW_TRANSITIONS, WindowState.OPEN)


def partial_machine() -> StateMachine[PartialState, PartialEvent]:
    return StateMachine(PARTIAL_TRANSITIONS, PartialState.IDLE)


def speech_machine() -> StateMachine[SpeechState, SpeechEvent]:
    return StateMachine(SPEECH_TRANSITIONS, SpeechState.SILENCE)
