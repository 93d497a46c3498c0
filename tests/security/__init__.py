"""Security tests: what an attacker, a careless operator or a stray process can do to a home."""
