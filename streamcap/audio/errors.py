"""Audio errors whose ``str()`` is one line a user can act on (the CLI prints it as is)."""

from __future__ import annotations

from streamcap.errors import ReportedError

__all__ = ["AudioError", "DeviceNotFoundError", "NoMicrophoneError"]


class AudioError(ReportedError):
    """Audio could not be read, decoded or captured."""


class NoMicrophoneError(AudioError):
    """No usable audio input device (no sound card, no PulseAudio, no PortAudio library)."""


class DeviceNotFoundError(NoMicrophoneError):
    """The ``--device`` the user asked for does not match any input device."""
