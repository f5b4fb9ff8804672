"""Word times of a decode from the decoder's cross-attention (openai-whisper's ``timing.py``).

Why: captions and subtitle cues need to know when each word was said, while the decode runs
without timestamp tokens (asking for them would change the tokens). A few cross-attention heads
of Whisper's decoder (the model's "alignment heads") follow the audio closely, so after the
decode one more forward pass over prefix + tokens + <|endoftext|> (no KV cache; the decode's
own prefix and encoder output) keeps those heads' attention logits, and a dynamic time warping
through them maps every token to an encoder position (20 ms each). The tokens never change.

The steps are openai-whisper's: softmax over the audio's positions only (not the padding),
z-normalised along tokens, a width-7 median filter along time, the mean over heads, DTW on its
negation; tokens grouped into words at spaces (at characters for languages written without
spaces), punctuation merged into its neighbours, a word's probability the mean of its tokens'
(softmax over the text tokens, from the same pass), overlong words at sentence ends and an
overlong first word trimmed to twice the median word length.

Where openai relies on the timestamp tokens we do not decode, three changes (measured on lf3's
recorded utterances with a second of room either side, see ``tests/decoding/test_alignment.py``):

- the DTW runs from the <|startoftranscript|> row, not from <|notimestamps|>: the forced rows
  take the audio before the first word, which openai's path pins to the window's first frame
  (first-word starts were 1 s early; now within ~0.1 s);
- the last word ends where the speech does: the DTW gives the end of a window's last word only
  as "somewhere before <|endoftext|>'s row" (openai's end, that of the row before a final full
  stop, was 0.2-0.5 s early; <|endoftext|>'s start 0.2-0.6 s late), so within that span it ends
  at the last encoder position louder than a quarter of the way from the window's noise floor to
  its peak (log-mel energy, `speech_level`);
- a prompt (previous text) stays in the pass, as in the decode (openai's timing pass drops it),
  so the probabilities are those the decode saw.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from torch.nn import functional as F

from streamcap.core.constants import ENCODER_POSITIONS_PER_S
from streamcap.core.decode_types import WordTiming
from streamcap.decoding.lean import CrossCapture, LeanDecoder, supports
from streamcap.decoding.spec import WhisperSpec
from streamcap.decoding.step import DecoderStep

__all__ = ["Aligner"]

#: openai-whisper's defaults (``transcribe.py``, ``timing.py``).
PREPEND_PUNCTUATIONS = "\"'\u201c\u00bf([{-"
APPEND_PUNCTUATIONS = "\"'.\u3002,\uff0c!\uff01?\uff1f:\uff1a\u201d)]}\u3001"
MEDIAN_FILTER_WIDTH = 7
_SENTENCE_END = ".\u3002!\uff01?\uff1f"
#: The last word ends at the last position this far from the noise floor to the peak (dB).
SPEECH_FRACTION = 0.25
#: ... if the window's floor and peak are at least this far apart (else: the DTW's end).
_MIN_CONTRAST_DB = 10.0
#: Languages written without spaces between words: split at characters instead.
_NO_SPACES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})


def alignment_heads(model: object) -> list[tuple[int, int]]:
    """(layer, head) pairs of the model's alignment heads (its generation config; our converter
    writes CTranslate2's table there). Without a table: every head of the last half of the
    decoder's layers, openai-whisper's own default."""
    config = getattr(model, "config", None)
    layers = int(getattr(config, "decoder_layers", 0))
    heads = int(getattr(config, "decoder_attention_heads", 0))
    table = getattr(getattr(model, "generation_config", None), "alignment_heads", None) or []
    chosen = [(int(la), int(h)) for la, h in table if int(la) < layers and int(h) < heads]
    return chosen or [(la, h) for la in range(layers // 2, layers) for h in range(heads)]


def median_filter(x: torch.Tensor, width: int) -> torch.Tensor:
    """Median over a sliding window of odd ``width`` along the last axis (edges reflected)."""
    pad = width // 2
    if width < 1 or width % 2 == 0:
        raise ValueError("the median filter's width must be odd")
    if x.shape[-1] <= pad:
        return x
    padded = F.pad(x[None] if x.dim() == 2 else x, (pad, pad), mode="reflect")
    out = padded.unfold(-1, width, 1).sort()[0][..., pad]
    return out[0] if x.dim() == 2 else out


def speech_level(features: torch.Tensor, positions: int) -> npt.NDArray[np.float64]:
    """Loudness (dB) of the first ``positions`` encoder positions, the louder of each one's two
    log-mel frames (Whisper's features: log10 power, floored 8 below the max, (x + 4) / 4)."""
    mel = features[0, :, : 2 * positions].float()
    db = 10 * torch.log10(torch.pow(10.0, 4 * mel - 4).mean(0))
    n = db.shape[0] // 2
    return db[: 2 * n].view(n, 2).amax(-1).double().cpu().numpy()


def _speech_end(level: npt.NDArray[np.float64], start: float, end: float) -> float | None:
    """The end of the last loud-enough position in [start, end) seconds, or None."""
    floor, peak = np.percentile(level, 10), np.percentile(level, 99)
    if peak - floor < _MIN_CONTRAST_DB:
        return None
    a = max(0, round(start * ENCODER_POSITIONS_PER_S))
    b = min(len(level), round(end * ENCODER_POSITIONS_PER_S))
    loud = np.flatnonzero(level[a:b] >= floor + SPEECH_FRACTION * (peak - floor))
    return (a + int(loud[-1]) + 1) / ENCODER_POSITIONS_PER_S if len(loud) else None


def dtw(cost: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The cheapest monotonic path through ``cost`` (rows: tokens, columns: time) from the
    first cell to the last, as (row, column) indices per step.

    openai-whisper's recurrence and tie rules (diagonal, up, else left), one row at a time in
    numpy instead of a Python loop per cell: within a row, ``C[j] = x[j] + min(b[j], C[j-1])``
    is a running minimum of ``b[k] - S[k-1]`` plus the prefix sum ``S[j]`` of the row.
    """
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    trace = np.full((n + 1, m + 1), 2, dtype=np.int8)
    for i in range(1, n + 1):
        prev = acc[i - 1]
        diag, up = prev[:-1], prev[1:]
        sums = np.cumsum(cost[i - 1])
        before = np.concatenate(([0.0], sums[:-1]))
        acc[i, 1:] = sums + np.minimum.accumulate(np.minimum(diag, up) - before)
        left = acc[i, :-1]
        trace[i, 1:] = np.where(
            (diag < up) & (diag < left), 0, np.where((up < diag) & (up < left), 1, 2)
        )
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n, m
    rows: list[int] = []
    cols: list[int] = []
    while i > 0 or j > 0:
        rows.append(i - 1)
        cols.append(j - 1)
        t = trace[i, j]
        if t == 0:
            i, j = i - 1, j - 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    return np.array(rows[::-1], dtype=np.int64), np.array(cols[::-1], dtype=np.int64)


def split_words(
    decode: Callable[[list[int]], str], tokens: Sequence[int], eot: int, language: str | None
) -> list[list[int]]:
    """Token indices of each word (openai's ``split_to_word_tokens``): tokens that decode to
    whole characters, joined into words at a leading space (each punctuation mark and special
    token its own word, merged later), or at characters for languages without spaces."""
    full = decode(list(tokens))
    pieces: list[list[int]] = []
    current: list[int] = []
    offset = 0
    for i in range(len(tokens)):
        current.append(i)
        text = decode([tokens[k] for k in current])
        cut = text.find("\ufffd")
        if cut < 0 or full[offset + cut : offset + cut + 1] == "\ufffd":
            pieces.append(current)
            current = []
            offset += len(text)
    if current:
        pieces.append(current)
    if language in _NO_SPACES:
        return pieces
    words: list[list[int]] = []
    for piece in pieces:
        text = decode([tokens[k] for k in piece])
        own = tokens[piece[0]] >= eot or text.startswith(" ") or text.strip() in string.punctuation
        if own or not words:
            words.append(list(piece))
        else:
            words[-1].extend(piece)
    return words


@dataclass
class _Word:
    word: str
    tokens: list[int]  # indices into the text tokens
    start: float
    end: float
    probability: float


def _merge_punctuations(words: list[_Word]) -> None:
    """openai's ``merge_punctuations``: opening marks join the next word, closing marks the
    previous (the word keeps its own times and probability)."""
    i, j = len(words) - 2, len(words) - 1
    while i >= 0:
        prev, follow = words[i], words[j]
        if prev.word.startswith(" ") and prev.word.strip() in PREPEND_PUNCTUATIONS:
            follow.word, follow.tokens = prev.word + follow.word, prev.tokens + follow.tokens
            prev.word, prev.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(words):
        prev, follow = words[i], words[j]
        if not prev.word.endswith(" ") and follow.word in APPEND_PUNCTUATIONS:
            prev.word, prev.tokens = prev.word + follow.word, prev.tokens + follow.tokens
            follow.word, follow.tokens = "", []
        else:
            i = j
        j += 1


def words_from_path(
    texts: Sequence[str],
    groups: Sequence[Sequence[int]],
    jump_times: npt.NDArray[np.float64],
    probabilities: Sequence[float],
    duration_s: float,
    level: npt.NDArray[np.float64] | None = None,
) -> tuple[WordTiming, ...]:
    """Words with times from the DTW's per-token start times (``jump_times``: one per token,
    then one for <|endoftext|>), openai's fixes for overlong words, the last word's end where
    the speech ends (``level``: `speech_level`), clamped into ``[0, duration_s]``, in order
    and never overlapping."""
    bounds = np.concatenate(([0], np.cumsum([len(g) for g in groups]))).astype(np.int64)
    words = [
        _Word(
            text,
            list(group),
            float(jump_times[bounds[k]]),
            float(jump_times[bounds[k + 1]]),
            float(np.mean([probabilities[t] for t in group])) if group else 0.0,
        )
        for k, (text, group) in enumerate(zip(texts, groups, strict=True))
    ]
    lengths = np.array([w.end - w.start for w in words])
    lengths = lengths[lengths.nonzero()]
    median = min(0.7, float(np.median(lengths))) if len(lengths) else 0.0
    longest = 2 * median
    if len(lengths):  # words at sentence ends are no longer than twice the median
        for k in range(1, len(words)):
            if words[k].end - words[k].start > longest:
                if words[k].word in _SENTENCE_END:
                    words[k].end = words[k].start + longest
                elif words[k - 1].word in _SENTENCE_END:
                    words[k].start = words[k].end - longest
    _merge_punctuations(words)
    kept = [w for w in words if w.word]
    if kept and kept[0].end > 4 * median:  # the first word after a pause (the window's start)
        first = kept[0]
        second = kept[1] if len(kept) > 1 else None
        too_long = first.end - first.start > longest
        if too_long or (second is not None and second.end - first.start > 2 * longest):
            if second is not None and second.end - second.start > longest:
                boundary = max(second.end / 2, second.end - longest)
                first.end = second.start = boundary
            first.start = max(0.0, first.end - longest)
    if kept and level is not None:
        end = _speech_end(level, kept[-1].start, float(jump_times[-1]))
        if end is not None:
            kept[-1].end = max(kept[-1].start, end)
    out: list[WordTiming] = []
    last = 0.0
    for w in kept:
        start = min(max(w.start, last, 0.0), duration_s)
        end = min(max(w.end, start), duration_s)
        out.append(WordTiming(w.word, start, end, w.probability))
        last = end
    return tuple(out)


class Aligner:
    """Word times for decodes of one model (``step``: its decoder; ``heads``: which cross-
    attention heads to follow, default `alignment_heads`)."""

    def __init__(
        self,
        model: object,
        step: DecoderStep,
        spec: WhisperSpec,
        heads: Sequence[tuple[int, int]] | None = None,
    ) -> None:
        self.step = step
        self.spec = spec
        lean = step.lean
        if lean is None:
            if not supports(step.decoder):
                raise ValueError("word timing needs a decoder laid out like WhisperDecoder")
            lean = LeanDecoder(step.decoder)  # shares the weights: nothing is copied
        self.lean: LeanDecoder = lean
        self.heads = list(heads) if heads is not None else alignment_heads(model)
        self._by_layer: dict[int, list[int]] = {}
        for layer, head in self.heads:
            self._by_layer.setdefault(layer, []).append(head)

    def _decode(self, ids: list[int]) -> str:
        text: str = self.spec.tokenizer.decode(ids, skip_special_tokens=True)
        return text

    @torch.inference_mode()
    def align(
        self,
        enc: torch.Tensor,
        prefix: Sequence[int],
        tokens: Sequence[int],
        duration_s: float,
        language: str | None = None,
        features: torch.Tensor | None = None,
    ) -> tuple[WordTiming, ...]:
        """Words of the text ``tokens`` decoded after ``prefix`` from ``enc`` (a window of
        ``duration_s`` seconds of audio), times in seconds from the window's start.
        ``features`` (the window's log-mel) place the last word's end where the speech ends."""
        tokens = list(tokens)
        if not tokens:
            return ()
        spec, lean = self.spec, self.lean
        p, n = len(prefix), len(tokens)
        seq = [*prefix, *tokens, spec.eot][: lean.max_len]  # its row is not needed: may drop
        if p + n > lean.max_len:
            raise ValueError(f"the decoder holds at most {lean.max_len} positions")
        frames = min(int(enc.shape[1]), max(1, math.ceil(duration_s * ENCODER_POSITIONS_PER_S)))
        sot = list(prefix).index(spec.sot)
        capture = CrossCapture(self._by_layer, frames, first_row=sot)
        hidden = lean.forward(seq, lean.new_cache(), enc, capture)
        weights = capture.stacked().softmax(-1)  # (heads, rows from <|sot|>, frames), fp32
        std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
        weights = (weights - mean) / std.clamp_min(1e-12)
        matrix = median_filter(weights, MEDIAN_FILTER_WIDTH).mean(0)
        first = p - 1 - sot  # the <|notimestamps|> row: it predicts the first text token
        # from <|sot|> (the forced rows take the audio before the first word) to the row that
        # predicts <|endoftext|>
        rows, cols = dtw(-matrix[: first + n + 1].double().cpu().numpy())
        jumps = np.diff(rows, prepend=-1).astype(bool)
        jump_times = cols[jumps][first:] / ENCODER_POSITIONS_PER_S  # per token, then eot
        probabilities = self._probabilities(hidden[p - 1 : p - 1 + n], tokens)
        groups = split_words(self._decode, tokens, spec.eot, language)
        texts = [self._decode([tokens[k] for k in g]) for g in groups]
        level = speech_level(features, frames) if features is not None else None
        return words_from_path(texts, groups, jump_times, probabilities, duration_s, level)

    def _probabilities(self, rows: torch.Tensor, tokens: list[int]) -> list[float]:
        """Probability of each token after its row, softmax over the text tokens (openai)."""
        eot = self.spec.eot
        proj = self.step.proj_out
        weight = proj.weight[:eot]
        logits = torch.mm(weight, rows.t()).t().float()  # W @ rows.T: faster for few rows
        if proj.bias is not None:
            logits += proj.bias[:eot].float()
        logp = logits.log_softmax(-1)
        ids = torch.tensor([min(t, eot - 1) for t in tokens], device=logp.device)
        got = logp.gather(1, ids[:, None])[:, 0].exp().tolist()
        return [0.0 if t >= eot else float(x) for t, x in zip(tokens, got, strict=True)]
