"""The README's event and the projection docs/projections.md declares for it agree.

The README appends ``PageViewed`` and runs ``my_app.page_stats``; docs/projections.md
declares that projection over that event. Their code blocks run here as written: the
event's class from the README, the declaration from the docs, folding the README's
event; and every projection name the two pages run is the declared one.
"""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eventplatform.events import Envelope, Position
from eventplatform.projections import fold, visible

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PROJECTIONS = ROOT / "docs" / "projections.md"
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.DOTALL)
RUN = re.compile(r"platform (?:projections (?:run|status)|replay --projection) (\w+\.[\w.]+)")


def blocks(page: Path, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(page.read_text()) if lang == language]


def block_with(page: Path, language: str, text: str) -> str:
    [found] = [body for body in blocks(page, language) if text in body]
    return found


def readme_event() -> type[Any]:
    """The README's ``PageViewed``: its class statement, run as written."""
    source = block_with(README, "python", "class PageViewed")
    [statement] = [node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)]
    namespace: dict[str, Any] = {}
    exec("from eventplatform.events import Event", namespace)
    exec(compile(ast.Module([statement], []), str(README), "exec"), namespace)
    event: type[Any] = namespace["PageViewed"]
    return event


def test_the_docs_projection_folds_the_readme_event() -> None:
    event_class = readme_event()
    declaration = block_with(PROJECTIONS, "python", "projection_table(")
    namespace: dict[str, Any] = {}
    exec(compile(declaration, str(PROJECTIONS), "exec"), namespace)
    projection, table = namespace["page_views"], namespace["page_stats"]
    namespace_event = namespace["PageViewed"]
    assert namespace_event.model_fields.keys() == event_class.model_fields.keys()
    assert namespace_event.event_type == event_class.event_type

    at = datetime(2026, 1, 1, tzinfo=UTC)
    viewed = namespace_event(user_id="u1", url="/")  # as the README appends it
    envelope = Envelope(viewed, occurred_at=at, position=Position(viewed.event_topic, 0, 0))
    states = fold(projection, [envelope])[str(table.name)]

    plan = projection.plans[str(table.name)]
    assert [visible(plan, state) for state in states.values()] == [
        {"url": "/", "views": 1, "time_on_page_ms": 0, "last_seen": at, "referrers": []}
    ]


def test_the_pages_run_the_projection_they_declare() -> None:
    declaration = block_with(PROJECTIONS, "python", "projection_table(")
    [declared] = re.findall(r'Projection\("([\w.]+)"', declaration)
    ran = {name for page in (README, PROJECTIONS) for name in RUN.findall(page.read_text())}
    assert ran == {declared}
    assert f'wait_until_applied(database_url, "{declared}"' in PROJECTIONS.read_text()
