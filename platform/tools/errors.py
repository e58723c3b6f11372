"""The exceptions of :mod:`eventplatform.tools`, each a one-line message for a person.

::

    ToolError                    the command failed; the CLI prints the message, exits 1
     ├── InvalidInputError       an argument or input the tools reject before any request
     ├── KafkaRequestError       the cluster refused a request or could not be reached
     └── GroupActiveError        a group with live members cannot have its offsets reset

Errors raised by confluent-kafka are translated at the boundary
(``raise KafkaRequestError(...) from exc``), so callers never see a
``KafkaException``.
"""

from __future__ import annotations


class ToolError(Exception):
    """A failure to report as one line, without a traceback."""


class InvalidInputError(ToolError):
    """An argument or an input line that no request could satisfy."""


class KafkaRequestError(ToolError):
    """The cluster answered with an error, or no answer came in time.

    ``code`` is the Kafka error name (``TOPIC_ALREADY_EXISTS``) or
    librdkafka's local one (``_TRANSPORT``), when one is known.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class GroupActiveError(ToolError):
    """The group has members; changing its offsets under them would be lost or fought over."""
