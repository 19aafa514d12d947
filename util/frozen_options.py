"""Read-only parsed options: `opt` is never patched after parsing (derived values live elsewhere)."""
from __future__ import annotations

import argparse
from typing import Any


class FrozenOptions(argparse.Namespace):
    """Parsed options; assigning to an attribute after parsing raises, so nothing patches `opt`."""

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(f"options are read-only after parsing (tried to set opt.{name})")
        super().__setattr__(name, value)

    def freeze(self) -> "FrozenOptions":
        super().__setattr__("_frozen", True)
        return self

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in sorted(vars(self).items()) if not k.startswith("_")}

    def replaced(self, **changes: Any) -> "FrozenOptions":
        """A frozen copy with `changes` applied (e.g. the options of a test run on another split)."""
        return FrozenOptions(**{**self.as_dict(), **changes}).freeze()
