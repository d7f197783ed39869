"""What the scripted model answers when no scenario applies.

The goal is a plausible session for someone trying the product from an IDE
without a real LLM: routing prompts get routing JSON, questions about files
trigger the file tools, tool results get summarised, anything else gets a
short, friendly canned answer in the user's language.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from services.scripted_model.chunks import content_text
from services.scripted_model.scenarios import Scenario, ToolCallSpec

# Checked in this order; the first agent with the most hits wins, so on a tie
# "fix the bug" goes to debug rather than coder. "ask" only wins on its own.
_AGENT_KEYWORDS: dict[str, tuple[str, ...]] = {
    "debug": ("error", "bug", "bugs", "debug", "traceback", "exception", "crash", "stacktrace",
              "ошибк", "отлад", "баг", "исключени", "падает"),
    "architect": ("design", "architecture", "architect", "plan", "structure",
                  "спроектируй", "архитектур", "проектирова", "спланируй", "план"),
    "coder": ("write", "create", "implement", "refactor", "fix", "fixes", "add", "generate",
              "напиши", "создай", "реализуй", "исправь", "добавь", "сделай", "рефактор"),
    "ask": ("what", "how", "why", "explain", "which", "что", "как", "почему", "объясни", "зачем"),
}  # fmt: skip
_FILE_WORDS = ("file", "files", "read", "list", "directory", "folder", "project", "файл",
               "прочитай", "покажи", "список", "папк", "проект")  # fmt: skip
_WRITE_WORDS = ("create", "write", "add", "напиши", "создай", "добавь", "запиши")
_WORD_RE = re.compile(r"\w+")
_PATH_RE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w/])")
_REQUEST_LABEL_RE = re.compile(
    r"(?:user request|request|message|query|task|запрос|сообщение|задача)\s*:\s*(.+)", re.I
)
_CYRILLIC_RE = re.compile(r"[а-яё]", re.I)
_SUMMARY_CHARS = 200
# The opening of the runtime's default compaction prompt (orchestrator/context.py).
_COMPACTION = "You condense a coding session"


def _keyword_hit(token: str, keyword: str) -> bool:
    # Short keywords ("how", "fix", "что") must match whole words; longer ones are stems.
    return token == keyword if len(keyword) <= 3 else token.startswith(keyword)


def _is_russian(text: str) -> bool:
    return bool(_CYRILLIC_RE.search(text))


def _last(messages: Sequence[Mapping[str, Any]], role: str) -> Mapping[str, Any] | None:
    return next((m for m in reversed(messages) if m.get("role") == role), None)


def classify(request_text: str) -> dict[str, str]:
    """Routing decision for a user request, in the classification prompt's JSON shape."""
    tokens = _WORD_RE.findall(request_text.lower())
    best, best_hits, matched = "coder", 0, list[str]()
    for agent, keywords in _AGENT_KEYWORDS.items():
        hits = [t for t in tokens if any(_keyword_hit(t, k) for k in keywords)]
        if len(hits) > best_hits and (agent != "ask" or best_hits == 0):
            best, best_hits, matched = agent, len(hits), hits
    if best_hits == 0:
        return {"agent": "coder", "confidence": "low", "reason": "no routing keywords; default"}
    confidence = "high" if best_hits >= 2 else "medium"
    return {"agent": best, "confidence": confidence, "reason": f"keywords: {', '.join(matched)}"}


def _classification_request(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The text to classify if this is a routing prompt, else None."""
    texts = [
        content_text(m.get("content")) for m in messages if m.get("role") in {"system", "user"}
    ]
    if not any("Respond with JSON" in t and "agent" in t for t in texts):
        return None
    last_user = _last(messages, "user")
    text = content_text(last_user.get("content")) if last_user else ""
    if "Respond with JSON" not in text:
        return text
    # The instructions and the request share one message: find the request itself
    # so the agent descriptions in the template don't drive the keyword match.
    labelled = _REQUEST_LABEL_RE.search(text)
    if labelled:
        return labelled.group(1).strip().strip("\"'«»")
    return "\n".join(
        line for line in text.splitlines() if "json" not in line.lower() and ":" not in line
    )


def _tool_names(tools: Any) -> dict[str, Mapping[str, Any]]:
    named: dict[str, Mapping[str, Any]] = {}
    for tool in tools if isinstance(tools, list) else ():
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            named[function["name"]] = function
    return named


def _path_argument(function: Mapping[str, Any]) -> str:
    """Name of the tool's path parameter: "path" unless the schema says otherwise."""
    parameters = function.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    names = [str(name) for name in properties] if isinstance(properties, Mapping) else []
    if not names or "path" in names:
        return "path"
    return next((name for name in names if "path" in name), names[0])


def _file_tool_call(text: str, tools: Any) -> ToolCallSpec | None:
    tokens = _WORD_RE.findall(text.lower())
    offered = _tool_names(tools)
    path = _PATH_RE.search(text)
    wants_write = any(_keyword_hit(t, word) for t in tokens for word in _WRITE_WORDS)
    if path and wants_write and "write_file" in offered:
        # A placeholder body that says what was asked: enough to try the approval flow.
        content = f"# {text.strip()}\n"
        return ToolCallSpec("write_file", {"path": path.group(1), "content": content})
    if not any(_keyword_hit(t, word) for t in tokens for word in _FILE_WORDS):
        return None
    if path and "read_file" in offered:
        argument = _path_argument(offered["read_file"])
        return ToolCallSpec("read_file", {argument: path.group(1)})
    if "list_files" in offered:
        return ToolCallSpec("list_files", {_path_argument(offered["list_files"]): "."})
    return None


def _tool_result_summary(messages: Sequence[Mapping[str, Any]], russian: bool) -> str:
    result = messages[-1]
    name = str(result.get("name") or "the tool")
    call_id = result.get("tool_call_id")
    for message in reversed(messages):
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping) and call.get("id") == call_id:
                name = str(call.get("function", {}).get("name", name))
    content = content_text(result.get("content")).strip()
    excerpt = content[:_SUMMARY_CHARS] + ("…" if len(content) > _SUMMARY_CHARS else "")
    if russian:
        return f"Я посмотрел результат {name}: {excerpt}"
    return f"I looked at the result of {name}: {excerpt}"


def _friendly_answer(user_text: str) -> str:
    request = " ".join(user_text.split())
    if len(request) > 120:
        request = request[:117] + "..."
    if _is_russian(user_text):
        return (
            "Привет! Я встроенная сценарная модель CodeLab, а не настоящая LLM, поэтому "
            f"отвечаю заготовкой. Ваш запрос: «{request}». Подключите настоящую модель, "
            "чтобы получить полноценный ответ."
        )
    if not request:
        return "Hi! I'm the built-in scripted model of CodeLab. How can I help?"
    return (
        "Hi! I'm the built-in scripted model of CodeLab, not a real LLM, so this is a canned "
        f'reply. You asked: "{request}". Connect a real model to get a proper answer.'
    )


def _summary_of(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """An extractive summary when this is the runtime's compaction request: the earlier
    summary's lines, then each user request of the transcript, oldest first."""
    system = _last(messages, "system")
    if system is None or not content_text(system.get("content")).startswith(_COMPACTION):
        return None
    last_user = _last(messages, "user")
    lines = []
    for line in content_text(last_user.get("content") if last_user else "").splitlines():
        if line.startswith("- "):
            lines.append(line)  # a line of the earlier summary
        elif line.startswith("[user] "):
            lines.append("- The user asked: " + line[len("[user] ") :][:_SUMMARY_CHARS])
    return "\n".join(lines) or "Nothing to summarise yet."


def default_scenario(body: Mapping[str, Any]) -> Scenario:
    """The reply for a request no queued scenario claimed."""
    messages = [m for m in body.get("messages", ()) if isinstance(m, Mapping)]
    summary = _summary_of(messages)
    if summary is not None:
        return Scenario(text=summary)
    last_user = _last(messages, "user")
    user_text = content_text(last_user.get("content")) if last_user else ""
    to_classify = _classification_request(messages)
    if to_classify is not None:
        return Scenario(text=json.dumps(classify(to_classify), ensure_ascii=False))
    last_role = messages[-1].get("role") if messages else None
    if last_role == "tool":
        return Scenario(text=_tool_result_summary(messages, _is_russian(user_text)))
    if last_role == "user" and body.get("tools"):
        call = _file_tool_call(user_text, body.get("tools"))
        if call is not None:
            return Scenario(tool_calls=(call,))
    return Scenario(text=_friendly_answer(user_text))
