"""The course's text: the Python language reference that ships with CPython.

``pydoc_data.topics.topics`` holds the help text behind ``help("assert")`` and friends: about
465 kB of English and code, present in every CPython installation and read at run time (never
copied into this repository). The real-model harness tokenizes it (:mod:`lectures.llm.text`);
the small training model reads its bytes (:mod:`lectures.tinylm.data`). Neither imports the
other: both import this module.
"""

from __future__ import annotations

__all__ = ["corpus_text"]


def corpus_text() -> str:
    """The whole language reference as one string: topics in sorted order, blank-line separated."""
    from pydoc_data.topics import topics
    return "\n\n".join(topics[key].strip() for key in sorted(topics))
