"""A writer process for the PostgreSQL crash and fencing tests.

``python -m tests.postgres.child_writer URL THREAD LEASE_SECONDS [MAX_REFUSED]``

Takes the thread's lease (waiting while another holder has it), prints ``READY <token>``,
then appends ``custom.n`` records (critical: each committed before the append returns) as
fast as it can, printing ``ACK <ord> <hash>`` after each append returned: the
acknowledgement channel. An append refused for a lost lease prints ``LOST <n>``, one whose
commit failed (the server ended a transaction left open while the process was paused)
``FAILED <why>``; after
``MAX_REFUSED`` of them (default: never) it prints ``DONE`` and exits 0.
"""

from __future__ import annotations

import sys
import time

from threadlog.errors import LeaseHeld, LeaseLost, StorageError
from threadlog.store.postgres import PostgresStore


def main() -> int:
    url, thread, lease = sys.argv[1], sys.argv[2], float(sys.argv[3])
    max_refused = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    out = sys.stdout
    with PostgresStore(url, lease_duration=lease, renew_interval=lease / 5) as store:
        deadline = time.monotonic() + 20
        while True:
            try:
                store.acquire(thread)
                break
            except LeaseHeld:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        token = store._writers[thread].token
        out.write(f"READY {token}\n")
        out.flush()
        refused = i = 0
        while True:
            i += 1
            try:
                record = store.append(thread, "custom.n", {"i": i}, durable=True)
            except StorageError as exc:  # e.g. a commit the server ended while we were paused
                out.write(f"FAILED {exc}\n".replace("\n", " ").rstrip() + "\n")
                out.flush()
                continue
            except LeaseLost:
                refused += 1
                out.write(f"LOST {refused}\n")
                out.flush()
                if max_refused and refused >= max_refused:
                    out.write("DONE\n")
                    out.flush()
                    return 0
                time.sleep(0.01)
                continue
            out.write(f"ACK {record.ord} {record.hash}\n")
            out.flush()


if __name__ == "__main__":
    sys.exit(main())
