"""A logger that exists only in the tests, given to train.py as `--logger recording_logger`: it keeps
every event it receives, in order (tests/test_loggers.py compares them with the built-in back ends'),
and adds a flag of its own, `--recording_label`."""
from __future__ import annotations

from util.display.backend import LoggerBackend, RunInfo

EVENTS = ("begin_epoch", "log_step", "log_images", "log_validation", "advance", "message", "close")


class RecordingLogger(LoggerBackend):
    """`events`: (event name, arguments) of every call; `instances`: every logger built in this process."""

    instances: list["RecordingLogger"] = []

    @staticmethod
    def modify_commandline_options(parser, is_train: bool):
        parser.add_argument("--recording_label", type=str, default="", on_resume="silent",
                            help="a name the recording logger keeps for the run (tests/recording_logger.py)")
        return parser

    def __init__(self, run: RunInfo) -> None:
        super().__init__(run)
        self.events: list[tuple[str, tuple]] = []
        self.label = run.opt.recording_label
        RecordingLogger.instances.append(self)

    def begin_epoch(self, *args) -> None:
        self.events.append(("begin_epoch", args))

    def log_step(self, *args) -> None:
        self.events.append(("log_step", args))

    def log_images(self, *args) -> None:
        self.events.append(("log_images", args))

    def log_validation(self, *args) -> None:
        self.events.append(("log_validation", args))

    def advance(self, *args) -> None:
        self.events.append(("advance", args))

    def message(self, *args) -> None:
        self.events.append(("message", args))

    def close(self, *args) -> None:
        self.events.append(("close", args))
