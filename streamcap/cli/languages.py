"""Whisper's language codes and names, so ``--language`` is checked before a model loads.

A static copy of transformers' ``models.whisper.tokenization_whisper.LANGUAGES`` (and its
extra names, ``TO_LANGUAGE_CODE``): importing transformers takes seconds, and a typo should
fail at once. A test keeps the copy equal to the original. Which of these a given model knows
is checked again once it is loaded (``base`` lacks Cantonese, English-only models ignore the
flag).
"""

from __future__ import annotations

import difflib

from streamcap.errors import UserError

#: code -> English name, in Whisper's token order.
LANGUAGES: dict[str, str] = {
    "en": "english", "zh": "chinese", "de": "german", "es": "spanish", "ru": "russian",
    "ko": "korean", "fr": "french", "ja": "japanese", "pt": "portuguese", "tr": "turkish",
    "pl": "polish", "ca": "catalan", "nl": "dutch", "ar": "arabic", "sv": "swedish",
    "it": "italian", "id": "indonesian", "hi": "hindi", "fi": "finnish", "vi": "vietnamese",
    "he": "hebrew", "uk": "ukrainian", "el": "greek", "ms": "malay", "cs": "czech",
    "ro": "romanian", "da": "danish", "hu": "hungarian", "ta": "tamil", "no": "norwegian",
    "th": "thai", "ur": "urdu", "hr": "croatian", "bg": "bulgarian", "lt": "lithuanian",
    "la": "latin", "mi": "maori", "ml": "malayalam", "cy": "welsh", "sk": "slovak", "te": "telugu",
    "fa": "persian", "lv": "latvian", "bn": "bengali", "sr": "serbian", "az": "azerbaijani",
    "sl": "slovenian", "kn": "kannada", "et": "estonian", "mk": "macedonian", "br": "breton",
    "eu": "basque", "is": "icelandic", "hy": "armenian", "ne": "nepali", "mn": "mongolian",
    "bs": "bosnian", "kk": "kazakh", "sq": "albanian", "sw": "swahili", "gl": "galician",
    "mr": "marathi", "pa": "punjabi", "si": "sinhala", "km": "khmer", "sn": "shona",
    "yo": "yoruba", "so": "somali", "af": "afrikaans", "oc": "occitan", "ka": "georgian",
    "be": "belarusian", "tg": "tajik", "sd": "sindhi", "gu": "gujarati", "am": "amharic",
    "yi": "yiddish", "lo": "lao", "uz": "uzbek", "fo": "faroese", "ht": "haitian creole",
    "ps": "pashto", "tk": "turkmen", "nn": "nynorsk", "mt": "maltese", "sa": "sanskrit",
    "lb": "luxembourgish", "my": "myanmar", "bo": "tibetan", "tl": "tagalog", "mg": "malagasy",
    "as": "assamese", "tt": "tatar", "haw": "hawaiian", "ln": "lingala", "ha": "hausa",
    "ba": "bashkir", "jw": "javanese", "su": "sundanese", "yue": "cantonese",
}  # fmt: skip

#: Other names Whisper accepts for a language.
ALIASES: dict[str, str] = {
    "burmese": "my", "valencian": "ca", "flemish": "nl", "haitian": "ht",
    "letzeburgesch": "lb", "pushto": "ps", "panjabi": "pa", "moldavian": "ro",
    "moldovan": "ro", "sinhalese": "si", "castilian": "es", "mandarin": "zh",
}  # fmt: skip

_BY_NAME: dict[str, str] = {name: code for code, name in LANGUAGES.items()} | ALIASES


def resolve_language(value: str | None) -> str | None:
    """The Whisper code for a code or a name in any case (``English``, ``en``, ``EN``).

    None stays None (detect the language). Anything else raises `UserError` with the closest
    match, or the list of codes when nothing is close.
    """
    if value is None:
        return None
    key = " ".join(value.strip().lower().replace("_", " ").split())
    if key in LANGUAGES:
        return key
    if key in _BY_NAME:
        return _BY_NAME[key]
    close = difflib.get_close_matches(key, [*LANGUAGES, *_BY_NAME], n=1, cutoff=0.75)
    if close:
        code = close[0] if close[0] in LANGUAGES else _BY_NAME[close[0]]
        hint = f"did you mean {code!r} ({LANGUAGES[code]})?"
    else:
        hint = "use a code or an English name: " + ", ".join(LANGUAGES)
    raise UserError(f"unknown language {value!r}: {hint}")
