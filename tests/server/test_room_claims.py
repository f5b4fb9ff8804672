"""The rules of a room's publishers (`server.rooms.RoomClaims`): pure, no sockets."""

from __future__ import annotations

from streamcap.server.close import CloseCode
from streamcap.server.rooms import RoomClaims


def test_names_are_distinct_per_room_and_rooms_are_bounded() -> None:
    claims: RoomClaims[str] = RoomClaims(max_per_room=2)
    assert claims.refusal("r", "Ana") is None
    claims.claim("r", "Ana", "s1")
    taken = claims.refusal("r", "Ana")
    assert taken is not None and taken.code == CloseCode.POLICY_VIOLATION
    assert "already publishing" in taken.reason
    claims.claim("r", "", "s2")  # one publisher without a name
    assert "already has a publisher" in str(claims.refusal("r", ""))  # the unnamed one
    full = claims.refusal("r", "Cy")
    assert full is not None and "limit of 2" in full.reason
    assert claims.refusal("other", "Ana") is None  # another room
    assert len(claims) == 2 and sorted(claims) == ["s1", "s2"]


def test_a_claim_is_released_only_by_its_holder() -> None:
    claims: RoomClaims[str] = RoomClaims(max_per_room=2)
    claims.claim("r", "Ben", "s1")
    claims.release("r", "Ben", "other session")  # not its claim (a takeover replaced it): kept
    assert claims.get("r", "Ben") == "s1"
    claims.release("r", "Ben", "s1")
    assert claims.get("r", "Ben") is None and len(claims) == 0
