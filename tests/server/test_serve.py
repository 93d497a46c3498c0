"""The serve runner's parts that need no running server: model specs, loopback, imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from threadlog.errors import UsageError
from threadlog.runtime.models import Model, ScriptedModel
from threadlog.server.serve import is_loopback, model_from_spec

MADE = ScriptedModel([])


def make_model() -> ScriptedModel:
    return ScriptedModel([], name="made")


def test_model_specs() -> None:
    assert isinstance(model_from_spec("scripted"), ScriptedModel)
    assert model_from_spec(f"python:{__name__}:MADE") is MADE
    made = model_from_spec(f"python:{__name__}:make_model")
    assert isinstance(made, Model) and made.name == "made"
    assert model_from_spec("openai:gpt-4o-mini").name == "gpt-4o-mini"
    assert model_from_spec("anthropic:claude-x").name == "claude-x"
    for bad in ("nope", "openai:", "python:nope", f"python:{__name__}:missing", "python:x:y"):
        with pytest.raises(UsageError):
            model_from_spec(bad)
    with pytest.raises(UsageError, match="not a model"):
        model_from_spec(f"python:{__name__}:__doc__")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("example.com", False),
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_importing_the_package_imports_no_web_framework() -> None:
    code = (
        "import sys, threadlog.server; "
        "assert not {'fastapi', 'starlette', 'uvicorn'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
