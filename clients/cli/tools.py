"""The IDE's tools, run for real inside the workspace.

Each tool takes the runtime's arguments (the catalog's JSON schemas) and returns what the
``tool_result`` carries; a failure raises a CliError whose code reaches the model.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from clients.cli import commands, patches, search
from clients.cli.errors import CliError, ToolFailed, UnknownTool
from clients.cli.person import Person
from clients.cli.workspace import Workspace

Tool = Callable[[dict[str, Any]], Awaitable[Any]]
MAX_READ = 512 * 1024
ASK_THE_PERSON = frozenset({"prompt_user", "apply_patch_review"})
"""Tools that are a question to the person (no spinner while they run)."""


class Toolbox:
    """Runs one tool call; ``person`` answers ``prompt_user``."""

    def __init__(
        self,
        workspace: Workspace,
        person: Person,
        *,
        command_timeout: float = commands.DEFAULT_TIMEOUT,
        ripgrep: str | None = search.RIPGREP,
    ) -> None:
        self.workspace = workspace
        self.person = person
        self.command_timeout = command_timeout
        self.ripgrep = ripgrep
        self.tools: dict[str, Tool] = {
            "read_file": self.read_file,
            "write_file": self.write_file,
            "list_files": self.list_files,
            "create_directory": self.create_directory,
            "search_in_code": self.search_in_code,
            "search_in_project": self.search_in_project,
            "execute_command": self.execute_command,
            "run_command": self.execute_command,
            "apply_patch": self.apply_patch,
            "apply_patch_review": self.apply_patch_review,
            "git.diff": self.git_diff,
            "prompt_user": self.prompt_user,
        }

    async def run(self, tool_name: str, arguments: Mapping[str, Any]) -> Any:
        """The tool's result; CliError when it is unknown, refused or fails."""
        tool = self.tools.get(tool_name)
        if tool is None:
            raise UnknownTool(f"codelab has no tool {tool_name!r}")
        checked = self.workspace.check_arguments(tool_name, arguments)
        try:
            return await tool(checked)
        except CliError:
            raise
        except (OSError, UnicodeError, ValueError, KeyError, TypeError) as error:
            raise ToolFailed(f"{tool_name}: {error}") from error

    def _file(self, arguments: dict[str, Any]) -> Path:
        return self.workspace.resolve(str(arguments["path"]))

    async def read_file(self, arguments: dict[str, Any]) -> str:
        path = self._file(arguments)
        if not path.is_file():
            raise ToolFailed(f"{arguments['path']}: no such file")
        if path.stat().st_size > MAX_READ:
            raise ToolFailed(f"{arguments['path']} is larger than {MAX_READ} bytes")
        text = path.read_text(encoding="utf-8")
        start, end = arguments.get("start_line"), arguments.get("end_line")
        if start is None and end is None:
            return text
        lines = text.splitlines(keepends=True)
        return "".join(lines[(start or 1) - 1 : end])

    async def write_file(self, arguments: dict[str, Any]) -> dict[str, Any]:
        path = self._file(arguments)
        content = str(arguments["content"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        return {"path": self.workspace.relative(path), "bytes_written": len(content.encode())}

    async def list_files(self, arguments: dict[str, Any]) -> list[str]:
        base = self.workspace.resolve(str(arguments.get("path", ".")))
        if not base.is_dir():
            raise ToolFailed(f"{arguments.get('path', '.')}: not a directory")
        children = (
            [p for p in sorted(base.rglob("*")) if not _skipped(p, base)]
            if arguments.get("recursive")
            else sorted(base.iterdir())
        )
        return [
            self.workspace.relative(p) + ("/" if p.is_dir() else "")
            for p in children
            if not p.is_symlink() or self.workspace.root in p.resolve().parents
        ]

    async def create_directory(self, arguments: dict[str, Any]) -> dict[str, Any]:
        path = self._file(arguments)
        path.mkdir(parents=True, exist_ok=True)
        return {"path": self.workspace.relative(path), "created": True}

    async def search_in_code(self, arguments: dict[str, Any]) -> list[dict[str, Any]]:
        base = self.workspace.resolve(str(arguments.get("path", ".")))
        query, pattern = str(arguments["query"]), arguments.get("file_pattern")
        if self.ripgrep:
            return await search.ripgrep_search(
                self.ripgrep, self.workspace, query, base, pattern, search.MAX_MATCHES
            )
        return search.python_search(self.workspace, query, base, pattern, search.MAX_MATCHES)

    async def search_in_project(self, arguments: dict[str, Any]) -> dict[str, Any]:
        limit = int(arguments.get("max_results", 50))
        query = str(arguments["query"])
        return {
            "files": search.project_files(self.workspace, query, limit),
            "matches": await self.search_in_code({"query": query, "path": "."}) if query else [],
        }

    async def execute_command(self, arguments: dict[str, Any]) -> dict[str, Any]:
        cwd = self.workspace.resolve(str(arguments.get("cwd", ".")))
        timeout = float(arguments.get("timeout") or self.command_timeout)
        return await commands.run(str(arguments["command"]), cwd, timeout)

    async def apply_patch(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"applied": patches.apply(self.workspace, str(arguments["patch"]))}

    async def apply_patch_review(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The person's review, which the runtime records as the approval; writes nothing
        (the model then calls ``apply_patch`` with what was kept)."""
        patch = str(arguments["patch"])
        patches.plan(self.workspace, patch)  # a patch that cannot apply is not put to anyone
        description = arguments.get("description")
        review = await self.person.review_patch(patch, str(description) if description else None)
        return review.result(patch)

    async def git_diff(self, arguments: dict[str, Any]) -> str:
        command = "git diff --no-color" + (" --staged" if arguments.get("staged") else "")
        if arguments.get("path"):
            self.workspace.resolve(str(arguments["path"]))
            command += " -- " + _quote(str(arguments["path"]))
        outcome = await commands.run(command, self.workspace.root, self.command_timeout)
        if outcome["exit_code"] != 0:
            raise ToolFailed(f"git diff failed: {outcome['stderr'].strip()}")
        return str(outcome["stdout"])

    async def prompt_user(self, arguments: dict[str, Any]) -> str:
        options = [str(option) for option in arguments.get("options") or ()]
        return await self.person.answer(str(arguments["question"]), options)


def _skipped(path: Path, base: Path) -> bool:
    return any(part in search.SKIPPED_DIRS for part in path.relative_to(base).parts)


def _quote(text: str) -> str:
    return shlex.quote(text)
