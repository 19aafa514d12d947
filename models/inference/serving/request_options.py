"""The options of a request to POST /translate, as query parameters or form text fields (docs/serving.md),
read as the client sent them: nothing it sends is dropped in silence.

    OPTIONS                                     every option's name (which of them a model takes:
                                                app.TranslationService.options_taken)
    named_options(items, where, taken)          name -> value, an unknown or repeated name refused (400)
    whole_number(fields, name, low, high)       an option's whole number in its range, or None when absent
"""
from __future__ import annotations

import difflib
from typing import Any

from models.inference.serving.receiving import FORM_FILES
from models.inference.serving.uploads import BadRequest, shown

# Files come as form files (receiving.FORM_FILES), not as options.
OPTIONS = ("direction", "n_samples", "seed", "steps", "response")


def whole_number(fields: dict[str, Any], name: str, low: int, high: int, bound_by: str = "") -> int | None:
    """The option `name` of `fields` as a whole number from `low` to `high` (None: not given or empty); else 400
    naming it, its value (cut) and the range (`bound_by`: the server's flag that sets it)."""
    value = fields.get(name)
    if value in (None, ""):
        return None
    range_text = f"give one from {low} to {high}{f' (this server: {bound_by})' if bound_by else ''}"
    digits = str(value).strip().lstrip("+-")
    if digits.isdigit() and digits.isascii() and len(digits) > 30:  # past int()'s reach, never in range
        raise BadRequest(400, f"{name}={shown(value)} is out of range; {range_text}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadRequest(400, f"{name}={shown(value)} is not a whole number; give one from {low} to {high}") from None
    if not low <= number <= high:
        raise BadRequest(400, f"{name}={number} is out of range; {range_text}")
    return number


def named_options(items: list[tuple[str, str]], where: str, taken: list[str],
                  already: dict[str, str] | None = None) -> dict[str, str]:
    """The options (name -> value) of `items`, the (name, value) pairs of the request's query or form
    (`where`), joined to those `already` read; a name that is no option of /translate, or one given twice,
    refused (400) naming it and the options this model takes (`taken`): none is dropped in silence."""
    names = [name for name, _ in items] + list(already or {})
    for name in names:
        if name in FORM_FILES:
            raise BadRequest(400, f"'{name}' in the {where} is a file: send it as a form file (curl -F "
                                  f"{name}=@photo.png)")
        if name not in OPTIONS:
            close = difflib.get_close_matches(name[:100], OPTIONS, n=1)
            meant = f" (did you mean {close[0]}?)" if close else ""
            raise BadRequest(400, f"unknown option {shown(name)} in the {where}{meant}; this model takes "
                                  f"{', '.join(taken)} (GET /info)")
        if names.count(name) > 1:
            raise BadRequest(400, f"the option '{name}' is given {names.count(name)} times (query and form "
                                  f"together); give it once")
    return {**(already or {}), **dict(items)}
