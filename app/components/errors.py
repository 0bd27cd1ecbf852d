"""Turn engine errors into ``st.error`` messages.

A user mistake (bad config value, unreadable archive, unknown run id) raises a subclass of
:class:`engine.errors.MasklabError` whose message already says what is wrong and what to do. The
browser shows that message, never a traceback. Anything else is a bug and still propagates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import streamlit as st

from engine.api import MasklabError

P = ParamSpec("P")
T = TypeVar("T")


def guarded(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T | None:
    """Call ``fn``; on a :class:`MasklabError` show ``st.error(message)`` and return None."""
    try:
        return fn(*args, **kwargs)
    except MasklabError as e:
        st.error(str(e))
        return None


@contextmanager
def user_errors() -> Iterator[None]:
    """``with user_errors(): ...``: a :class:`MasklabError` inside becomes ``st.error`` and the
    rest of the block is skipped (the page goes on after the block)."""
    try:
        yield
    except MasklabError as e:
        st.error(str(e))
