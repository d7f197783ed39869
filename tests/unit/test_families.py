"""FamilyMap: a message's end forgets its session and its delegates', and nothing else."""

from services.orchestrator.turn.families import FamilyMap


def test_a_session_is_dropped_with_every_delegate_under_it() -> None:
    rows: FamilyMap[int] = FamilyMap()
    for key in ("s1", "s1.c1", "s1.c1.c9", "s1.c2", "s10", "s10.c1", "s2"):
        rows[key] = len(key)
    assert sorted(rows.drop_family("s1")) == ["s1", "s1.c1", "s1.c1.c9", "s1.c2"]
    assert sorted(rows) == ["s10", "s10.c1", "s2"]  # "s10" only shares a prefix


def test_a_delegate_is_dropped_without_its_parent_or_siblings() -> None:
    rows: FamilyMap[str] = FamilyMap()
    for key in ("p", "p.a", "p.a.x", "p.b"):
        rows[key] = key
    assert sorted(rows.drop_family("p.a")) == ["p.a", "p.a.x"]
    assert sorted(rows) == ["p", "p.b"]
    assert rows._delegates == {"p": {"p.b"}}  # the index holds only what is kept
    assert rows.drop_family("p") == ["p", "p.b"]
    assert rows == {}


def test_only_present_keys_are_reported_and_a_key_set_again_is_found() -> None:
    rows: FamilyMap[int] = FamilyMap()
    assert rows.drop_family("gone") == []
    rows["q.d"] = 1
    assert rows.drop_family("q") == ["q.d"]  # the parent itself was never kept
    rows["q.d"] = 2
    assert rows.drop_family("q") == ["q.d"]
    assert rows.drop_family("q") == []


def test_a_delegate_set_by_setdefault_goes_with_its_parent() -> None:
    budgets: FamilyMap[list[int]] = FamilyMap()
    budgets.setdefault("s.c1", []).append(1)
    assert budgets.setdefault("s.c1", []) == [1]  # kept, not replaced
    assert budgets.drop_family("s") == ["s.c1"]
    assert budgets == {}
