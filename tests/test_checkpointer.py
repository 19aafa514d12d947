"""The Checkpointer names its files as the docs say and finds the newest training state to continue
from, driving any object with the model's checkpoint methods (no model or data needed)."""
from __future__ import annotations

import argparse
import json
import os

import pytest
import torch

from models.training.checkpointer import Checkpointer
from util.distributed import DistContext
from util.errors import UserError
from util.position import Position


class FakeModel:
    """The methods the Checkpointer drives, writing `<label>_net_G.pth` as a model would."""

    def __init__(self, run_dir, ema: bool = False) -> None:
        self.run_dir, self.ema, self.weight = run_dir, (object() if ema else None), torch.zeros(2)

    def check_finite(self, epoch, total_iters, images_per_step, weights=False) -> None:
        pass

    def save_networks(self, epoch, include_ema=True) -> None:
        torch.save({"w": self.weight}, self.run_dir / f"{epoch}_net_G.pth")
        if include_ema and self.ema is not None:
            self.save_ema_networks(epoch)

    def save_ema_networks(self, epoch) -> None:
        torch.save({"w": self.weight}, self.run_dir / f"{epoch}_ema_net_G.pth")

    def shared_training_state(self) -> dict:
        return {"networks": {"G": {"w": self.weight}}}

    def rank_training_state(self) -> dict:
        return {}


def resume_flags(**changes) -> argparse.Namespace:
    flags = dict(continue_train=True, auto_resume=False, epoch="latest", load_iter=0, epoch_count=1, seed=7)
    return argparse.Namespace(**{**flags, **changes})


def test_saves_are_named_latest_epoch_and_iter_and_a_resume_continues_from_the_newest(tmp_path):
    checkpointer = Checkpointer(str(tmp_path), DistContext(), images_per_step=4, save_by_iter=True)
    start = checkpointer.find_start(resume_flags(continue_train=False))
    assert start.state is None and start.position == Position(epoch=1) and start.seed == 7
    model = FakeModel(tmp_path)
    checkpointer.save_progress(model, Position(1, 8, 8))
    checkpointer.save_epoch(model, 1, Position(2, 0, 12))
    model.weight = torch.ones(2)
    checkpointer.save_latest(model, Position(2, 4, 16))
    files = {path.name for path in tmp_path.iterdir()}
    assert {"iter_8_net_G.pth", "iter_8_train_state.pth", "1_net_G.pth", "1_train_state.pth",
            "latest_net_G.pth", "latest_train_state.pth"} <= files
    for age, label in enumerate(("latest", "1", "iter_8")):  # coarse file-system clocks may tie them
        os.utime(tmp_path / f"{label}_train_state.pth", (1e9 - age, 1e9 - age))

    resumed = Checkpointer(str(tmp_path), DistContext(), images_per_step=4).find_start(resume_flags(seed=None))
    assert resumed.position == Position(2, 4, 16) and resumed.seed == 7
    assert torch.equal(resumed.state["model"]["networks"]["G"]["w"], torch.ones(2))
    assert resumed.rank_state is not None and "rng" in resumed.rank_state


def test_best_files_follow_the_metric_and_go_on_from_the_resumed_runs_best(tmp_path):
    checkpointer = Checkpointer(str(tmp_path), DistContext(), images_per_step=1)
    start = checkpointer.find_start(resume_flags(continue_train=False))
    checkpointer.track_best("L1", start)
    model = FakeModel(tmp_path, ema=True)
    assert checkpointer.keep_best(model, {"L1": 0.5, "ema_L1": 0.6}, 1, 10) == 0.5
    assert checkpointer.keep_best(model, {"L1": 0.7, "ema_L1": 0.4}, 2, 20) is None  # only the average improved
    best = json.loads((tmp_path / "best.json").read_text())
    assert (best["best"]["epoch"], best["best_ema"]["epoch"]) == (1, 2)
    assert (tmp_path / "best_net_G.pth").exists() and (tmp_path / "best_ema_net_G.pth").exists()
    checkpointer.save_latest(model, Position(3, 0, 20))

    again = Checkpointer(str(tmp_path), DistContext(), images_per_step=1)
    again.track_best("L1", again.find_start(resume_flags()))
    assert again.keep_best(model, {"L1": 0.6}, 3, 30) is None  # 0.5 from before the resume still holds


def test_continue_train_in_an_empty_folder_is_refused_naming_it(tmp_path):
    with pytest.raises(UserError, match=str(tmp_path)):
        Checkpointer(str(tmp_path), DistContext(), images_per_step=1).find_start(resume_flags())


def test_stale_temporary_files_of_a_killed_writer_are_removed(tmp_path):
    (tmp_path / ".latest_net_G.pth.abc.tmp").write_bytes(b"half")
    (tmp_path / "latest_net_G.pth").write_bytes(b"whole")
    (tmp_path / "web" / "images").mkdir(parents=True)
    (tmp_path / "web" / "images" / ".epoch001_fake_B.png.abc.tmp").write_bytes(b"half")  # the pages' images too
    Checkpointer(str(tmp_path), DistContext(), images_per_step=1).remove_stale_temporary_files()
    assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*") if path.is_file()) == \
        ["latest_net_G.pth"]
