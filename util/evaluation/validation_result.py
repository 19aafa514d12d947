"""One validation's outcome, as the training loop hands it to the loggers (util/display/)."""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass
class ValidationResult:
    """The scores of one validation (metric name -> value), how long it took, how many images it scored,
    and the first image's visuals for the HTML page."""
    scores: dict[str, float]
    seconds: float
    images: int
    visuals: OrderedDict = field(default_factory=OrderedDict)
