"""``python -m threadlog``: the ``threadlog`` command."""

from threadlog.cli import main

if __name__ == "__main__":
    main()
