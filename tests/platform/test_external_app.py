"""An app written outside the repository gets what the bundled apps get.

``external_app`` (the guestbook) is not installed: the tests name it through
``$EVENTPLATFORM_APPS`` or ``--app``, as a user would name their own app, and
then run its command (``platform apps guestbook sign``) against the real
broker of this folder, create its table (``platform db upgrade``), fold its
events with its projection and read them back with its named query
(``platform query guestbook.signatures``) from a real SQLite database.
"""

from __future__ import annotations

import csv
import io
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from eventplatform.cli import main
from eventplatform.projections.apps import load_app
from eventplatform.runtime import running_projections, wait_caught_up
from eventplatform.testing import BrokerProcess

HERE = Path(__file__).resolve().parent
APP_REFERENCE = "external_app"
APPLY_TIMEOUT_S = 60.0


@pytest.fixture
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guestbook importable as ``external_app``, as a user's own package would be."""
    monkeypatch.syspath_prepend(str(HERE))


def invoke(*arguments: str) -> str:
    result = CliRunner().invoke(main, list(arguments))
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def signatures(url: str, guest: str, *app_option: str) -> list[list[str]]:
    """The named query's rows for ``guest``, as CSV cells."""
    output = invoke(
        "query", "guestbook.signatures", *app_option, "--database", url,
        "--param", f"guest={guest}", "--format", "csv",
    )  # fmt: skip
    return list(csv.reader(io.StringIO(output)))[1:]


def fold(url: str, bootstrap: str) -> None:
    """Run the guestbook's projection until it has applied its topic to the end."""
    app = load_app(APP_REFERENCE)
    [projection] = app.projections
    with running_projections([projection.name], [app], url, bootstrap):
        wait_caught_up([projection.name], url, bootstrap, list(projection.topics), APPLY_TIMEOUT_S)


def test_an_app_named_in_the_environment_gets_its_commands_and_queries(
    importable: None, broker: BrokerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTPLATFORM_APPS", APP_REFERENCE)
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    guest = f"ann-{uuid.uuid4().hex[:8]}"

    listing = invoke("apps", "--help")
    assert "guestbook  A guestbook." in listing
    signed = invoke(
        "apps", "guestbook", "sign", "--bootstrap", broker.bootstrap,
        "--guest", guest, "--times", "3", "--message", "see you",
    )  # fmt: skip
    assert f"{guest} signed 3 times on 'guestbook'" in signed

    assert "guestbook_0001" in invoke("db", "upgrade", "--database", url)
    fold(url, broker.bootstrap)
    assert signatures(url, guest) == [[guest, "3", "see you"]]
    assert "guestbook.signatures" in invoke("query", "--list")


def test_an_app_named_with_the_app_option_gets_its_commands_and_queries(
    importable: None, broker: BrokerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EVENTPLATFORM_APPS", raising=False)
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    guest = f"bob-{uuid.uuid4().hex[:8]}"
    option = ("--app", APP_REFERENCE)

    unknown = CliRunner().invoke(main, ["apps", "guestbook", "--help"])
    assert unknown.exit_code == 2 and "No such command 'guestbook'" in unknown.output
    invoke("apps", *option, "guestbook", "sign", "--bootstrap", broker.bootstrap, "--guest", guest)

    invoke("db", "upgrade", "--database", url, *option)
    fold(url, broker.bootstrap)
    assert signatures(url, guest, *option) == [[guest, "1", "hello"]]
