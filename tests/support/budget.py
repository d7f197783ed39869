"""A small context budget for compaction tests: the window, large files, the size check."""

from __future__ import annotations

from services.scripted_model.chunks import count_prompt_tokens
from tests.support.mesh import Mesh
from tests.support.templates import update_template

WINDOW, RESERVE = 16_384, 1_024
PROMPT_BUDGET = WINDOW - RESERVE


async def small_window(mesh: Mesh, *agents: str) -> None:
    """Give ``agents`` the small window, and make the model refuse what a real one would:
    a prompt past the budget."""
    for agent in agents:
        await update_template(
            mesh, agent, llm_config={"context_window": WINDOW, "max_output_tokens": RESERVE}
        )
    mesh.scripted.context_window = PROMPT_BUDGET


def all_fit(mesh: Mesh) -> int:
    """Every request the model received since the last check fits the prompt budget
    (counted as the scripted model counts): a refused prompt, compacted and retried
    without a word, fails here. Forgets them; returns how many there were."""
    requests = mesh.scripted.requests
    sizes = [count_prompt_tokens(r["messages"], r.get("tools")) for r in requests]
    assert sizes and max(sizes) <= PROMPT_BUDGET, max(sizes, default=0)
    mesh.scripted.clear_requests()
    return len(requests)


def source_file(turn: int, lines: int = 80) -> str:
    """A large tool result: code, about 16 tokens a line."""
    line = f"def handler_{turn}(request, context):  # returns the response for turn {turn}\n"
    return line * lines
