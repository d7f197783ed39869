"""What a valid agent template definition is: seed 003's shape, defaults and limits.

``canonical`` turns a submitted definition into the one stored form (every section
present, defaults filled, lists as lists), so "a new version only when it changed" is a
plain equality. ``check_references`` then checks the names it points at: tools in the
catalog, agents to hand over to. Pure Python: the callers bring the known names.

The stored shape::

    name, display_name, description, base_class,
    prompt_pack      {system_prompt, initial_user_request_template,
                      clarification_response_template, [compaction_prompt]}
    llm_config       {model, temperature, max_tokens, [context_window, max_output_tokens,
                      send_reasoning]}   ([...]: stored only when given)
    execution_policy {max_iterations, max_tool_calls, max_invalid_arguments, [max_turn_tokens],
                      max_clarifications?, max_searches?, timeouts?, stop_conditions?}
                      (the optional ones: budgets.py)
    tool_policy      {mode: static | retrieval, allowed: [tool | "*" | "agent.<name>" |
                      "agent.*" | "<source>.*"], required, max_tools}
    file_restrictions [regex], handoff [agent],
    hitl (alias approval_policy) {always_approve, never_approve, command_allow,
                      command_deny, read_only: [str]},
    multiagent_meta  {capabilities, tags}
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from services.orchestrator.agents.budgets import OPTIONAL_KEYS, canonical_budgets
from services.orchestrator.errors import BadFileRule, InvalidTemplate, UnknownAgent, UnknownTool

ALL_TOOLS = "*"
SOURCE_GLOB = re.compile(r"^[a-z][a-z0-9_-]{0,39}\.\*$")
AGENT_TOOL_PREFIX = "agent."
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{1,63}$")
BASE_CLASS_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
DEFAULT_BASE_CLASS = "ToolCallingAgent"
TOOL_MODES = ("static", "retrieval")
HITL_LISTS = ("always_approve", "never_approve", "command_allow", "command_deny", "read_only")
# (lowest, highest) accepted; outside them a template is a typo or a runaway budget.
LIMITS: Mapping[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "max_tokens": (1, 200_000),
    "context_window": (1_024, 10_000_000),
    "max_output_tokens": (1, 1_000_000),
    "max_iterations": (1, 500),
    "max_tool_calls": (1, 5_000),
    "max_invalid_arguments": (0, 100),
    "max_turn_tokens": (0, 100_000_000),
    "max_tools": (0, 256),
}
PROMPT_KEYS = ("system_prompt", "initial_user_request_template", "clarification_response_template")
OPTIONAL_PROMPTS = ("compaction_prompt",)
LLM_KEYS = ("model", "temperature", "max_tokens")
BUDGET_KEYS = ("context_window", "max_output_tokens")
EXECUTION_DEFAULTS: Mapping[str, int] = {
    "max_iterations": 25,
    "max_tool_calls": 50,
    "max_invalid_arguments": 3,
}
TOP_LEVEL = (
    "name", "display_name", "description", "base_class", "prompt_pack", "llm_config",
    "execution_policy", "tool_policy", "file_restrictions", "handoff", "hitl", "multiagent_meta",
)  # fmt: skip
TURN_TOKENS = "max_turn_tokens"


def _known_keys(value: Mapping[str, Any], allowed: Collection[str], where: str) -> None:
    # A typo ("max_iteration") would otherwise be stored and silently ignored.
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise InvalidTemplate(f"{where} has unknown field(s) {unknown}; known: {sorted(allowed)}")


def _section(raw: Mapping[str, Any], key: str, allowed: Collection[str]) -> Mapping[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, Mapping):
        raise InvalidTemplate(f"'{key}' must be a JSON object")
    _known_keys(value, allowed, f"'{key}'")
    return value


def _text(section: Mapping[str, Any], key: str, where: str, default: str = "") -> str:
    value = section.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise InvalidTemplate(f"'{where}{key}' must be a string")
    return value.strip()


def _names(section: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = section.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InvalidTemplate(f"'{where}{key}' must be a list of non-empty strings")
    return list(dict.fromkeys(v.strip() for v in value))  # order kept, duplicates dropped


def _number(section: Mapping[str, Any], key: str, where: str, default: Any, kind: type) -> Any:
    value = section.get(key, default)
    if value is None and default is None:
        return None
    # bool is an int to Python, never a budget to a human.
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if not is_number or (kind is int and not float(value).is_integer()):
        expected = "an integer" if kind is int else "a number"
        raise InvalidTemplate(f"'{where}{key}' must be {expected}")
    low, high = LIMITS[key]
    if not low <= value <= high:
        raise InvalidTemplate(f"'{where}{key}' must be between {low} and {high}, got {value}")
    return kind(value)


def _budget(llm: Mapping[str, Any]) -> dict[str, Any]:
    """The context budget keys given (absent ones stay absent: defaults apply at run time)."""
    out: dict[str, Any] = {
        key: value
        for key in BUDGET_KEYS
        if (value := _number(llm, key, "llm_config.", None, int)) is not None
    }
    window, output = out.get("context_window"), out.get("max_output_tokens")
    if window is not None and output is not None and output >= window // 2:
        raise InvalidTemplate(
            "'llm_config.max_output_tokens' must leave at least half of context_window "
            f"for the prompt ({output} of {window})"
        )
    send = llm.get("send_reasoning")
    if send is not None:
        if not isinstance(send, bool):
            raise InvalidTemplate("'llm_config.send_reasoning' must be true or false")
        out["send_reasoning"] = send
    return out


def _check_regexes(patterns: list[str]) -> None:
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as error:
            raise BadFileRule(f"file restriction {pattern!r} is not a regex: {error}") from error


# The flat shape of the first schema (before seed 003's sections): key -> (section, key).
LEGACY_KEYS: Mapping[str, tuple[str, str | None]] = {
    "system_prompt": ("prompt_pack", "system_prompt"),
    "allowed_tools": ("tool_policy", "allowed"),
    "llm": ("llm_config", None),
    "execution": ("execution_policy", None),
    "approval_policy": ("hitl", None),  # the name the issue tracker and admins use
}


def upgrade(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A definition in the first, flat shape moved into seed 003's sections (no checks).

    Rows written by older code or by hand keep working; a key given both ways must agree.
    """
    upgraded = {k: v for k, v in raw.items() if k not in LEGACY_KEYS}
    for old, (section, key) in LEGACY_KEYS.items():
        if old not in raw:
            continue
        current = upgraded.get(section)
        target = dict(current) if isinstance(current, Mapping) else {}
        moved = raw[old] if key is None else {key: raw[old]}
        if not isinstance(moved, Mapping):
            raise InvalidTemplate(f"'{old}' must be a JSON object")
        clash = [k for k, v in moved.items() if k in target and target[k] != v]
        if clash:
            raise InvalidTemplate(f"'{old}' and '{section}' disagree on {clash}")
        upgraded[section] = {**target, **moved}
    return upgraded


def canonical(raw: Any) -> dict[str, Any]:
    """The stored form of a definition; raises InvalidTemplate / BadFileRule.

    The first, flat shape (system_prompt, allowed_tools, llm, execution) is accepted too.
    """
    if not isinstance(raw, Mapping):
        raise InvalidTemplate("a template definition must be a JSON object")
    raw = upgrade(raw)
    _known_keys(raw, TOP_LEVEL, "the definition")
    top = raw
    name = _text(top, "name", "")
    if not name:
        raise InvalidTemplate("'name' is required")
    if not NAME_PATTERN.match(name):
        raise InvalidTemplate(
            f"bad template name {name!r}: 2-64 of a-z, 0-9, '_' or '-', starting with a letter"
        )
    base_class = _text(top, "base_class", "", DEFAULT_BASE_CLASS) or DEFAULT_BASE_CLASS
    if not BASE_CLASS_PATTERN.match(base_class):
        raise InvalidTemplate(f"bad base_class {base_class!r}: an identifier is expected")
    prompts = _section(top, "prompt_pack", PROMPT_KEYS + OPTIONAL_PROMPTS)
    if not _text(prompts, "system_prompt", "prompt_pack."):
        raise InvalidTemplate("'prompt_pack.system_prompt' is required and must not be empty")
    llm = _section(top, "llm_config", LLM_KEYS + BUDGET_KEYS + ("send_reasoning",))
    budget = _budget(llm)
    execution = _section(
        top, "execution_policy", (*EXECUTION_DEFAULTS, TURN_TOKENS, *OPTIONAL_KEYS)
    )
    tools = _section(top, "tool_policy", ("mode", "allowed", "required", "max_tools"))
    mode = _text(tools, "mode", "tool_policy.", "static") or "static"
    if mode not in TOOL_MODES:
        raise InvalidTemplate(f"'tool_policy.mode' must be one of {TOOL_MODES}, got {mode!r}")
    allowed = _names(tools, "allowed", "tool_policy.")
    if not allowed:
        raise InvalidTemplate("'tool_policy.allowed' must name at least one tool (or '*')")
    file_restrictions = _names(top, "file_restrictions", "")
    _check_regexes(file_restrictions)
    hitl = _section(top, "hitl", HITL_LISTS)
    meta = _section(top, "multiagent_meta", ("capabilities", "tags"))
    return {
        "name": name,
        "display_name": _text(top, "display_name", "") or name.title(),
        "description": _text(top, "description", ""),
        "base_class": base_class,
        "prompt_pack": {
            **{key: _text(prompts, key, "prompt_pack.") for key in PROMPT_KEYS},
            **{k: p for k in OPTIONAL_PROMPTS if (p := _text(prompts, k, "prompt_pack."))},
        },
        "llm_config": {
            "model": _text(llm, "model", "llm_config."),
            "temperature": _number(llm, "temperature", "llm_config.", None, float),
            "max_tokens": _number(llm, "max_tokens", "llm_config.", None, int),
            **budget,
        },
        "execution_policy": {
            **{
                key: _number(execution, key, "execution_policy.", default, int)
                for key, default in EXECUTION_DEFAULTS.items()
            },
            # Prompt + completion tokens a turn may spend (BUDGET_EXCEEDED past it); absent: off.
            **(
                {"max_turn_tokens": _number(execution, TURN_TOKENS, "execution_policy.", 0, int)}
                if TURN_TOKENS in execution
                else {}
            ),
            **canonical_budgets(execution),
        },
        "tool_policy": {
            "mode": mode,
            "allowed": allowed,
            "required": _names(tools, "required", "tool_policy."),
            "max_tools": _number(tools, "max_tools", "tool_policy.", 0, int),
        },
        "file_restrictions": file_restrictions,
        "handoff": _names(top, "handoff", ""),
        # An empty list means "the default" to hitl, so it is no part of the definition.
        "hitl": {k: v for k in HITL_LISTS if (v := _names(hitl, k, "hitl."))},
        "multiagent_meta": {
            "capabilities": _text(meta, "capabilities", "multiagent_meta."),
            "tags": _names(meta, "tags", "multiagent_meta."),
        },
    }


def check_references(
    definition: Mapping[str, Any],
    tools: Collection[str],
    agents: Collection[str] | Callable[[str], bool],
) -> None:
    """Raise UnknownTool / UnknownAgent / InvalidTemplate for names that do not resolve.

    ``tools``: the catalog's tool names; ``agents``: the active template names (or a
    predicate), the template itself excluded from hand-over targets.
    """
    policy = definition["tool_policy"]
    allowed, required = policy["allowed"], policy["required"]
    exists = agents if callable(agents) else agents.__contains__
    for where, names in (("allowed", allowed), ("required", required)):
        unknown = [n for n in names if n != ALL_TOOLS and not n.startswith(AGENT_TOOL_PREFIX)]
        # "<source>.*": every tool of a tool source, whenever the source lists them.
        globs = {n for n in unknown if where == "allowed" and SOURCE_GLOB.match(n)}
        unknown = [n for n in unknown if n not in tools and n not in globs]
        if unknown:
            raise UnknownTool(f"tool_policy.{where}: unknown tool(s) {unknown}", tools=unknown)
        # agent.<name> delegates to another template (agent-as-tool); agent.* to any.
        delegates = [n[len(AGENT_TOOL_PREFIX) :] for n in names if n.startswith(AGENT_TOOL_PREFIX)]
        missing = [a for a in delegates if a != ALL_TOOLS and not exists(a)]
        if missing:
            raise UnknownAgent(f"tool_policy.{where}: unknown agent(s) {missing}", agents=missing)
    outside = [n for n in required if ALL_TOOLS not in allowed and n not in allowed]
    if outside:
        raise UnknownTool(f"tool_policy.required: {outside} are not in tool_policy.allowed")
    if policy["max_tools"] and policy["max_tools"] < len(required):
        raise InvalidTemplate("'tool_policy.max_tools' is smaller than the required tools")
    name = definition["name"]
    if name in definition["handoff"]:
        raise InvalidTemplate(f"{name!r} cannot hand over to itself")
    missing = [a for a in definition["handoff"] if not exists(a)]
    if missing:
        raise UnknownAgent(f"handoff: unknown agent(s) {missing}", agents=missing)
