#!/usr/bin/env python3
"""Draw the loss curves of a training run from its loss_log.txt (also while it is still training).

    python scripts/plot_losses.py checkpoints/NAME                  # -> checkpoints/NAME/loss_plot.png
    python scripts/plot_losses.py checkpoints/NAME/loss_log.txt -o losses.png

One small plot per loss; x is the fractional epoch (epochs completed). Resumed runs (several
"Training Loss" sections in the log) are joined, each resume replacing what an earlier run logged
after that point, and marked with a dotted line. train.py writes the same plot when it finishes.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from util.console import setup_logging  # noqa: E402
from util.display.loss_log import loss_curves, parse_loss_log, plot_loss_log  # noqa: E402
from util.errors import EXIT_USER_ERROR, exit_with_status  # noqa: E402
from util.flag_types import OneParagraphParser  # noqa: E402
from util.paths import unwritable_file_reason  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    parser = OneParagraphParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run folder (checkpoints/NAME) or its loss_log.txt")
    parser.add_argument("-o", "--output", default=None, help="PNG to write (default: loss_plot.png next to the log)")
    parser.add_argument("--title", default=None, help="title of the figure (default: the run folder's name)")
    args = parser.parse_args(argv)

    log = os.path.join(args.run, "loss_log.txt") if os.path.isdir(args.run) else args.run
    if not os.path.isfile(log):
        print(f"error: {log} does not exist; pass a run folder (checkpoints/NAME) or its loss_log.txt.",
              file=sys.stderr)
        return EXIT_USER_ERROR
    out = args.output or os.path.join(os.path.dirname(os.path.abspath(log)), "loss_plot.png")
    if os.path.realpath(out) == os.path.realpath(log):  # the plot would replace the log it is drawn from
        print(f"error: --output {out} is the log {log} the plot is drawn from, so nothing was written; pass another "
              f"--output, e.g. -o {os.path.splitext(out)[0]}_plot.png.", file=sys.stderr)
        return EXIT_USER_ERROR
    reason = unwritable_file_reason(out)
    if reason:
        print(f"error: --output {out} cannot be written ({reason}); pass another --output, e.g. -o losses.png.",
              file=sys.stderr)
        return EXIT_USER_ERROR
    sections = parse_loss_log(log)
    curves = loss_curves(sections)
    if not curves.x:
        print(f"error: {log} holds no loss lines yet (they appear every --print_freq images).", file=sys.stderr)
        return EXIT_USER_ERROR
    plot_loss_log(log, out, title=args.title)
    resumed = f", {len(curves.resumes)} resume(s)" if curves.resumes else ""
    print(f"{out}: {len(curves.names)} losses ({', '.join(curves.names)}), {len(curves.x)} points, "
          f"{len(sections)} section(s){resumed}, epochs {curves.x[0]:.2f} to {curves.x[-1]:.2f}")
    return 0


if __name__ == "__main__":
    exit_with_status(main())
