// AudioWorklet: the microphone's samples, at the AudioContext's own rate, in frames of
// `frameSamples` (default ~100 ms) as little-endian PCM, posted to the page (which sends
// them over the /ingest WebSocket). Mono: several input channels are averaged.
"use strict";

class MicPcmProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = (options && options.processorOptions) || {};
    this.frame = Math.max(128, Math.floor(o.frameSamples || sampleRate / 10));
    this.f32 = o.format === "f32le";
    this.buf = this.f32 ? new Float32Array(this.frame) : new Int16Array(this.frame);
    this.n = 0;
    this.port.onmessage = (e) => {
      if (e.data === "flush") this.flush();
    };
  }

  flush() {
    if (!this.n) return;
    const out = this.buf.slice(0, this.n); // a copy we can transfer
    this.port.postMessage(out.buffer, [out.buffer]);
    this.n = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || !input.length) return true;
    const len = input[0].length;
    const chans = input.length;
    for (let i = 0; i < len; i++) {
      let s = 0;
      for (let c = 0; c < chans; c++) s += input[c][i];
      s /= chans;
      if (s > 1) s = 1;
      else if (s < -1) s = -1;
      this.buf[this.n++] = this.f32 ? s : s < 0 ? Math.round(s * 32768) : Math.round(s * 32767);
      if (this.n === this.frame) this.flush();
    }
    return true;
  }
}

registerProcessor("mic-pcm", MicPcmProcessor);
