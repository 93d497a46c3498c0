"""The threadlog service: HTTP + Server-Sent Events over any store (``threadlog serve``).

Needs the optional extra ``threadlog[server]`` (FastAPI, uvicorn), except `tokens`, which the
``threadlog token`` commands use without it. The contract is ``docs/service.md``.
"""
