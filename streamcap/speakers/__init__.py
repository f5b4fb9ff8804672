"""Speaker embeddings from the voice: the offline voice encoder (`voice_encoder.VoiceEncoder`).

A building block of the runtime, like `streamcap.decoding`: torch is imported by
`streamcap.speakers.voice_encoder`, not here, so importing the package stays light. The pure
clustering and change-point rules are `streamcap.core.speakers`; the caption stage that labels a
live stream's finals is `streamcap.runtime.labeller`.
"""

from __future__ import annotations

__all__ = ["VoiceEncoder", "shared_encoder", "weights_path"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from streamcap.speakers import voice_encoder

        return getattr(voice_encoder, name)
    raise AttributeError(f"module 'streamcap.speakers' has no attribute {name!r}")
