"""A broker with secured listeners and a user, and the client properties file that
reaches it, for the tests of the platform's own clients.

The broker and its users come from the interop tests of the listeners
(``tests/interop/test_interop_security.py``): PLAINTEXT, SASL_PLAINTEXT, SASL_SSL and
SSL listeners, a development CA, SCRAM credentials made with the admin API.
"""

from __future__ import annotations

from pathlib import Path

from tests.interop.test_interop_security import SecuredBroker, create_users, start_secured

USER = "platform-client"
PASSWORD = "a secret the logs never see"
MECHANISM = "SCRAM-SHA-512"


def start_secured_cluster(directory: Path) -> SecuredBroker:
    """The broker, started, with :data:`USER`'s SCRAM credentials; kill it when done."""
    broker = start_secured(directory)
    try:
        create_users(broker, {USER: PASSWORD})
    except BaseException:
        broker.process.kill()
        raise
    return broker


def write_client_properties(
    broker: SecuredBroker, path: Path, *, listener: str = "SASL_SSL", mechanism: str = MECHANISM
) -> Path:
    """A client properties file for ``listener`` as a user would write it."""
    lines = [
        f"# {listener} with {mechanism}",
        f"bootstrap.servers={broker.process.bootstrap_of(listener)}",
        f"security.protocol={listener}",
    ]
    if listener.startswith("SASL_"):
        lines += [
            f"sasl.mechanism={mechanism}",
            f"sasl.username={USER}",
            f"sasl.password={PASSWORD}",
        ]
    if "SSL" in listener:
        lines.append(f"ssl.ca.location={broker.authority / 'ca.pem'}")
    path.write_text("\n".join(lines) + "\n")
    return path
