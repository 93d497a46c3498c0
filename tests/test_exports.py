from __future__ import annotations

import threadlog


def test_all_is_sorted_and_complete() -> None:
    assert threadlog.__all__ == sorted(threadlog.__all__)
    for name in threadlog.__all__:
        assert getattr(threadlog, name) is not None, name


def test_unknown_attribute() -> None:
    try:
        threadlog.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("no AttributeError")
