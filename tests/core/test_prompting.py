"""A stream's own prompt (`core.prompting`): pure rules, no model."""

from __future__ import annotations

import pytest

from streamcap.core.prompting import join_prompt_ids, parse_vocabulary, stream_prompt


def test_vocabulary_terms_are_trimmed_and_deduplicated_in_order() -> None:
    assert parse_vocabulary("Kubernetes, Nguyen;\n gRPC ,, kubernetes") == (
        "Kubernetes", "Nguyen", "gRPC"
    )  # fmt: skip
    assert parse_vocabulary(["  New   York ", "new york", ""]) == ("New York",)
    with pytest.raises(ValueError, match="control"):
        parse_vocabulary(["a\x00b"])


def test_the_stream_prompt_is_the_text_then_the_terms() -> None:
    assert stream_prompt() == ""
    assert stream_prompt("A meeting about clusters.") == "A meeting about clusters."
    assert stream_prompt("", ["Kubernetes", "Nguyen"]) == "Kubernetes, Nguyen."
    assert stream_prompt("Team call.", ["gRPC"]) == "Team call. gRPC."
    with pytest.raises(ValueError, match="at most 1000"):
        stream_prompt("z" * 999, ["abc"])


def test_the_context_gives_way_to_the_streams_own_prompt() -> None:
    assert join_prompt_ids((1, 2), (7, 8, 9), 4) == (1, 2, 8, 9)  # the context's end is kept
    assert join_prompt_ids((), (7, 8, 9), 2) == (8, 9)
    assert join_prompt_ids((1, 2, 3), (7,), 2) == (1, 2)  # too long: cut, no context
    assert join_prompt_ids((1,), (), 5) == (1,)
