from __future__ import annotations

import threadlog


def test_all_is_sorted_and_complete() -> None:
    assert threadlog.__all__ == sorted(threadlog.__all__)
    for name in threadlog.__all__:
        assert hasattr(threadlog, name), name
    public = {n for n in vars(threadlog) if not n.startswith("_")}
    # Modules and the Store alias are the only public names outside __all__.
    extra = {
        n
        for n in public - set(threadlog.__all__)
        if not isinstance(getattr(threadlog, n), type(threadlog))
    }
    assert extra <= {"Store", "TYPE_CHECKING", "annotations"}
