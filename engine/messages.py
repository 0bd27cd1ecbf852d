"""Errors in masklab's words: what a user reads never carries a library's own sentence.

Two kinds of foreign text reach a message: pydantic's validation errors (``Input should be less
than or equal to 0.95``) and an exception's ``str()`` (``Expecting value: line 1 column 1 (char 0)``,
``[Errno 13] Permission denied: '/x'``, ``Error while loading: ...``). :func:`field_problems` turns
the first into ``masking.ratio: must be at most 0.95 (got 1.2)`` by the error's *type* (a stable
pydantic code, not its English text), and :func:`describe_error` turns the second into a few plain
words by the exception's class. Every config, option, limit and parameter validator of the engine
goes through :func:`field_problems`; every "cannot read X (why)" message through :func:`describe_error`.
"""

from __future__ import annotations

import json
import zipfile
from typing import Any

#: pydantic error type -> our sentence; ``{name}`` fields come from the error's ``ctx``.
TEMPLATES = {
    "greater_than": "must be more than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "multiple_of": "must be a multiple of {multiple_of}",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be text",
    "string_too_short": "must have at least {min_length} characters",
    "string_too_long": "must have at most {max_length} characters",
    "string_pattern_mismatch": "does not have the expected form",
    "literal_error": "must be one of {expected}",
    "enum": "must be one of {expected}",
    "missing": "is required",
    "dict_type": "must be a section of key: value pairs",
    "model_type": "must be a section of key: value pairs",
    "model_attributes_type": "must be a section of key: value pairs",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "too_short": "needs at least {min_length} items",
    "too_long": "takes at most {max_length} items",
    "none_required": "must be empty",
}


def field_problems(error: Any, prefix: str = "") -> list[tuple[str, str, bool]]:
    """Each problem of a pydantic ``ValidationError`` as ``(field path, our sentence, ours)``.

    Args:
        error: a ``pydantic.ValidationError``.
        prefix: prepended to each path, e.g. ``"masking.params"``.

    Returns:
        ``(loc, text, own)``: ``loc`` the dotted path (``prefix`` alone for a model-level problem);
        ``text`` the sentence, with `` (got <value>)`` for a scalar input; ``own`` True when the text
        is a masklab validator's own message (``ValueError`` raised in a validator): those that
        start with ``@`` already name their field (``@masking.params.p: ...``) and are returned
        without the ``@``, with ``loc`` ``""``.
        ``extra_forbidden`` becomes ``"unknown field"``.
    """
    out = []
    for err in error.errors():
        loc = ".".join([p for p in (prefix,) if p] + [str(p) for p in err["loc"]])
        kind = err["type"]
        if kind in ("value_error", "assertion_error"):
            msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
            if msg.startswith("@"):
                out.append(("", msg[1:], True))
                continue
            if "input" in err and not isinstance(err["input"], (dict, list)):
                msg += f" (got {err['input']!r})"
            out.append((loc, msg, True))
            continue
        if kind == "extra_forbidden":
            out.append((loc, "unknown field", False))
            continue
        template = TEMPLATES.get(kind)
        try:
            text = template.format(**(err.get("ctx") or {})) if template else "is not a valid value"
        except (KeyError, IndexError):
            text = "is not a valid value"
        if "input" in err and not isinstance(err["input"], (dict, list)):
            text += f" (got {err['input']!r})"
        out.append((loc, text, False))
    return out


def format_problems(error: Any, prefix: str = "", *, empty_loc: str = "config") -> str:
    """:func:`field_problems` joined: ``"train.steps: must be at least 1 (got 0); model.arch: ..."``."""
    parts = []
    for loc, text, _ in field_problems(error, prefix):
        parts.append(text if not loc and text else f"{loc or empty_loc}: {text}")
    return "; ".join(parts)


def describe_error(e: BaseException) -> str:
    """A few plain words for why a file could not be read, by the exception's class:
    ``"not valid JSON (line 3, column 5)"``, ``"permission denied"``, ``"not UTF-8 text"``,
    ``"damaged or not in the expected format"``... Never the library's own sentence."""
    if isinstance(e, json.JSONDecodeError):
        return f"not valid JSON (line {e.lineno}, column {e.colno})"
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 text (byte {e.start})"
    if isinstance(e, FileNotFoundError):
        return "the file is missing"
    if isinstance(e, PermissionError):
        return "permission denied"
    if isinstance(e, IsADirectoryError):
        return "a folder where a file was expected"
    if isinstance(e, zipfile.BadZipFile):
        return "damaged (not a valid zip container)"
    if isinstance(e, EOFError):
        return "cut short (truncated)"
    if isinstance(e, MemoryError):
        return "too large to load in memory"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror[0].lower() + e.strerror[1:]
    return "damaged or not in the expected format"


def unpickling_reason(e: BaseException) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, in one line, without PyTorch's advice
    to retry with ``weights_only=False`` (the unsafe path: it runs the file's code): the
    ``Unsupported global`` it met (``GLOBAL builtins.print``...), else the first line that gives no advice."""
    lines = [ln.strip() for ln in str(e).replace("\x1b[1m", "").replace("\x1b[0m", "").splitlines() if ln.strip()]
    for ln in lines:
        if "Unsupported global" in ln or "Unsupported operand" in ln:
            reason = ln.split("WeightsUnpickler error:", 1)[-1].strip()
            return reason.split(" was not an allowed global")[0].split(". Please")[0]
    safe = [ln for ln in lines if "weights_only" not in ln and "can still be loaded" not in ln
            and "trusted source" not in ln and "trust the source" not in ln]
    return safe[0][:200] if safe else type(e).__name__
