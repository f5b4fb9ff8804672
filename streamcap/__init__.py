"""streamcap: real-time streaming Whisper captioner."""
