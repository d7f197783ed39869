"""Human-in-the-loop approval policy over tool calls proposed by the LLM (pure functions).

``evaluate`` decides whether a human must approve a tool call before it reaches the IDE.
The policy is data (``ApprovalPolicy``, one per agent template); the model's own opinion
of the call (``model_says_safe``) is accepted for logging symmetry but never lowers risk.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Literal

from services.common.paths import workspace_relative
from services.hitl.allow_list import AllowList, default_allow_list
from services.hitl.command_options import DEFAULT_SYSTEM_DIRS, is_system_path
from services.hitl.command_risk import analyse_command

__all__ = [
    "COMMAND_TOOLS",
    "DEFAULT_POLICY",
    "DIRECTORY_TOOLS",
    "FILE_MODIFICATION_TOOLS",
    "REVIEW_TOOLS",
    "ApprovalDecision",
    "ApprovalPolicy",
    "Risk",
    "evaluate",
]

Risk = Literal["low", "medium", "high"]

FILE_MODIFICATION_TOOLS = frozenset({"write_file", "apply_patch", "apply_patch_review"})
# The IDE shows the patch and the person picks its hunks: that review is the approval
# (seed 001's patch review flow), recorded in the audit log when its result comes back.
REVIEW_TOOLS = frozenset({"apply_patch_review"})
COMMAND_TOOLS = frozenset({"execute_command", "run_command"})
DIRECTORY_TOOLS = frozenset({"create_directory"})
_READ_ONLY_TOOLS = frozenset(
    {"read_file", "list_files", "search_in_code", "search_in_project", "git.diff"}
    | {"attempt_completion", "ask_followup_question", "prompt_user", "create_plan", "echo"}
    | {"calculator"}
)


@dataclass(frozen=True)
class ApprovalDecision:
    """Outcome of ``evaluate``: whether a human must approve, why, and how risky it is."""

    requires_approval: bool
    reason: str | None
    risk: Risk


@dataclass(frozen=True)
class ApprovalPolicy:
    """Per-agent-template approval rules (data, not code).

    ``never_approve`` waives approval for a tool but never for a high-risk finding (a
    dangerous command, a deny-list match, a system directory); a ``command_allow`` glob
    likewise waives what the rules call risky, never what they call dangerous.
    ``read_only`` is the allow-list a command no rule objected to must match (unknown
    means ask).
    """

    always_approve: frozenset[str] = FILE_MODIFICATION_TOOLS - REVIEW_TOOLS
    never_approve: frozenset[str] = _READ_ONLY_TOOLS
    command_allow: tuple[str, ...] = ()
    command_deny: tuple[str, ...] = ()
    read_only: AllowList = field(default_factory=default_allow_list)
    workspace_root: str = "."
    system_dirs: tuple[str, ...] = DEFAULT_SYSTEM_DIRS


DEFAULT_POLICY = ApprovalPolicy()


def _approve(reason: str, risk: Risk) -> ApprovalDecision:
    return ApprovalDecision(requires_approval=True, reason=reason, risk=risk)


_NO_APPROVAL = ApprovalDecision(requires_approval=False, reason=None, risk="low")


def _command_text(arguments: Mapping[str, object]) -> str | None:
    raw = arguments.get("command", arguments.get("cmd"))
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list | tuple) and all(isinstance(part, str) for part in raw):
        return shlex.join(str(part) for part in raw)
    return None


def _command_decision(arguments: Mapping[str, object], policy: ApprovalPolicy) -> ApprovalDecision:
    command = _command_text(arguments)
    if command is None:
        return _approve("Command argument is missing or not a string", "high")
    risk = analyse_command(command, system_dirs=policy.system_dirs, allow=policy.read_only)
    # Patterns are matched against the whole line and each simple command in it, so a deny
    # pattern cannot be dodged by prefixing a harmless command (`ls; rm -rf x`).
    candidates = [" ".join(command.split()), *risk.commands]
    denied = next((p for p in policy.command_deny for c in candidates if fnmatchcase(c, p)), None)
    if denied is not None:
        return _approve(f"Command matches deny list ({denied})", "high")
    if risk.dangerous:
        return _approve("Dangerous command: " + "; ".join(risk.reasons), "high")
    if risk.safe:
        if not risk.allowed:
            return _NO_APPROVAL  # nothing runs (an empty line, a comment)
        return ApprovalDecision(False, "Read-only allow-list: " + ", ".join(risk.allowed), "low")
    # Every simple command must be allow-listed: `pytest *` must not wave `pytest; pip i x`.
    globs = [
        next((p for p in policy.command_allow if fnmatchcase(c, p)), None) for c in risk.commands
    ]
    if globs and all(globs):
        patterns = ", ".join(dict.fromkeys(p for p in globs if p))
        return ApprovalDecision(False, f"Template allow-list: {patterns}", "low")
    return _approve("Command needs review: " + "; ".join(risk.reasons), "medium")


def _directory_decision(
    arguments: Mapping[str, object], policy: ApprovalPolicy
) -> ApprovalDecision:
    path = arguments.get("path", arguments.get("directory"))
    if not isinstance(path, str) or not path:
        return _approve("Directory path is missing or not a string", "medium")
    if is_system_path(path, policy.system_dirs):
        return _approve(f"Directory is in a system location: {path}", "high")
    if workspace_relative(path, policy.workspace_root) is None:
        return _approve(f"Directory is outside the workspace: {path}", "medium")
    return _NO_APPROVAL


_RISKS: dict[str, Risk] = {"low": "low", "medium": "medium", "high": "high"}


def _rated(tool_name: str, risk: Risk) -> ApprovalDecision:
    """A tool of a tool source, judged by the risk its source gave it."""
    reason = f"{tool_name}: {risk} risk (rated by its tool source)"
    return ApprovalDecision(risk != "low", reason, risk)


_REVIEWED_IN_IDE = ApprovalDecision(False, "the IDE's patch review is the approval", "low")


def evaluate(
    tool_name: str,
    arguments: Mapping[str, object],
    policy: ApprovalPolicy = DEFAULT_POLICY,
    *,
    model_says_safe: bool | None = None,
    tool_risk: str = "",
) -> ApprovalDecision:
    """Decide whether ``tool_name(arguments)`` needs human approval.

    ``model_says_safe`` is deliberately ignored: a model that was talked into a dangerous
    call would also call it safe, so its opinion can never remove an approval.
    ``tool_risk`` (the catalog's rating of a tool no rule knows, set by its source)
    decides for such a tool: low runs unasked, medium and high ask.
    """
    del model_says_safe
    if tool_name in policy.always_approve:
        if tool_name in FILE_MODIFICATION_TOOLS:
            return _approve("File modification requires approval", "medium")
        return _approve(f"Tool {tool_name} always requires approval", "medium")
    if tool_name in COMMAND_TOOLS:
        decision = _command_decision(arguments, policy)
    elif tool_name in DIRECTORY_TOOLS:
        decision = _directory_decision(arguments, policy)
    elif tool_name in REVIEW_TOOLS:
        return _REVIEWED_IN_IDE
    elif tool_name in FILE_MODIFICATION_TOOLS:
        decision = _approve("File modification requires approval", "medium")
    elif tool_name in policy.never_approve:
        return _NO_APPROVAL
    elif tool_risk in _RISKS:
        return _rated(tool_name, _RISKS[tool_risk])
    else:
        decision = _approve("Unknown tool requires approval", "medium")
    waived = tool_name in policy.never_approve and decision.risk != "high"
    return _NO_APPROVAL if waived and decision.requires_approval else decision
