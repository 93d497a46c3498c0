"""Token usage, cost and budgets (pure).

Seed 002 asks what a restarted session knows of the budget it already spent: the answer must
come from the log, not from a counter in memory. Every ``model.responded`` carries the
provider's ``usage`` and is a *critical* record (`threadlog.model.policy`), so the reducer's
totals (`ThreadState.usage`, `TurnState.usage`) are rebuilt exactly by a replay after any
crash or restart.

*Usage* is a flat object of numbers: ``input_tokens`` and ``output_tokens`` (the providers
normalize to these), optionally ``cost`` (reported by the provider, or computed by the
runtime from the thread's ``prices`` setting when the record is written, so that a later
price change never rewrites the past), and whatever other counters a provider reports
(``cache_read_input_tokens``…). Totals add up every numeric value under its key.

*Budget* (the thread's ``budget`` setting) limits what a thread, or one turn, may spend::

    {"thread_tokens": 200000, "turn_tokens": 50000, "thread_cost": 5.0, "turn_cost": 1.0}

Tokens count input plus output. The check runs before each model call: a turn that has
reached a limit ends ``failed`` with the reason ``budget exceeded: …`` instead of calling the
model again (the calls the last response proposed are settled first; nothing is cut off in
the middle of a write).

*Prices* (the ``prices`` setting) are per million tokens, by model name::

    {"gpt-4.1": {"input": 2.0, "output": 8.0}}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadlog.errors import UsageError

if TYPE_CHECKING:
    from threadlog.model.state import ThreadState

__all__ = [
    "BUDGET_KEYS",
    "add_usage",
    "check_budget",
    "check_config",
    "check_prices",
    "exceeded",
    "priced",
    "tokens",
]

BUDGET_KEYS = ("thread_tokens", "turn_tokens", "thread_cost", "turn_cost")
"""The limits a ``budget`` setting may hold."""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def add_usage(total: dict[str, Any], usage: Any) -> None:
    """Add one response's usage to a total, in place (non-numeric values are ignored)."""
    if not isinstance(usage, dict):
        return  # a usage moved to the artifact store, or none: nothing to count
    for key, value in usage.items():
        # (an int or a float as such, the common case, without the call `_number` costs)
        if value.__class__ is int or value.__class__ is float or _number(value):
            total[key] = total.get(key, 0) + value


def tokens(usage: dict[str, Any]) -> int:
    """Input plus output tokens of a usage (or a total)."""
    return int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))


def check_budget(budget: Any) -> dict[str, Any]:
    """Validate a ``budget`` setting; returns it, or raises `UsageError` saying what is wrong."""
    if not isinstance(budget, dict):
        raise UsageError("budget must be an object, e.g. {'thread_tokens': 100000}")
    for key, value in budget.items():
        if key not in BUDGET_KEYS:
            raise UsageError(f"unknown budget key {key!r} (known: {', '.join(BUDGET_KEYS)})")
        if key.endswith("_tokens"):
            if type(value) is not int or value <= 0:
                raise UsageError(f"budget.{key} must be a positive integer")
        elif not _number(value) or value <= 0:
            raise UsageError(f"budget.{key} must be a positive number")
    return budget


def check_prices(prices: Any) -> dict[str, Any]:
    """Validate a ``prices`` setting (model → ``{"input", "output"}`` per million tokens)."""
    if not isinstance(prices, dict):
        raise UsageError("prices must be an object: model name → {'input': x, 'output': y}")
    for model, price in prices.items():
        if not isinstance(price, dict) or set(price) - {"input", "output"}:
            raise UsageError(f"prices.{model} must be {{'input': x, 'output': y}}")
        for key, value in price.items():
            if not _number(value) or value < 0:
                raise UsageError(f"prices.{model}.{key} must be a number ≥ 0")
    return prices


def check_config(config: dict[str, Any]) -> None:
    """Validate the ``budget`` and ``prices`` of a thread's config (or of a change to it)."""
    if config.get("budget") is not None:
        check_budget(config["budget"])
    if config.get("prices") is not None:
        check_prices(config["prices"])


def priced(usage: dict[str, Any], model: str, prices: Any) -> dict[str, Any]:
    """``usage`` with its ``cost``: kept when the provider reported one, else computed from
    the model's price per million tokens, else left out."""
    if "cost" in usage or not isinstance(prices, dict):
        return usage
    price = prices.get(model)
    if not isinstance(price, dict):
        return usage
    cost = (
        usage.get("input_tokens", 0) * price.get("input", 0)
        + usage.get("output_tokens", 0) * price.get("output", 0)
    ) / 1_000_000
    return {**usage, "cost": cost}


def exceeded(state: ThreadState, turn_id: str) -> str | None:
    """Why the running turn may not call the model again (None: within budget)."""
    budget = state.config.get("budget")
    if not isinstance(budget, dict):
        return None
    turn = state.turns[turn_id].usage
    spent = {
        "thread_tokens": tokens(state.usage),
        "turn_tokens": tokens(turn),
        "thread_cost": state.usage.get("cost", 0),
        "turn_cost": turn.get("cost", 0),
    }
    for key in BUDGET_KEYS:
        limit = budget.get(key)
        if _number(limit) and spent[key] >= limit:
            return f"budget exceeded: {key} {spent[key]:g} of {limit:g}"
    return None
