"""The runtime layer: a model on a device, the inference worker thread, live streams, clocks and
the one pacer, offline transcription. Built on `core`; used by `server` and `cli`."""
