"""Approval policies (see `threadlog.model.approvals`, where the pure rules live)."""

from threadlog.model.approvals import DEFAULT_POLICY, Decision, check_policy, decide

__all__ = ["DEFAULT_POLICY", "Decision", "check_policy", "decide"]
