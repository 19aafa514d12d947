"""What a model saves and loads: its networks' checkpoint files in the reference's format, and its part
of the training state that an exact resume restores (weights, optimizers, schedulers, the
augmentation's state and the model's own random streams; the training engine adds the gradient
scalers, moving averages, the compile choice and the epoch's losses). A part of `BaseModel`
(models/base_model.py), in a file of its own."""
from __future__ import annotations

import os
from typing import Any, Mapping

from torch import nn

from models import networks
from models.networks import checkpoint_files
from models.training import schedules
from models.training.training_state import STATE_SUFFIX
from util import distributed
from util.console import print0
from util.errors import UserError


class ModelState:
    """Saving and loading for BaseModel (which provides named_networks, optimizers, schedulers,
    diff_augment, opt, ctx and save_dir)."""

    def shared_training_state(self) -> dict:
        """What all ranks share: weights, optimizer and scheduler states (plain tensors/containers);
        subclasses add theirs (e.g. image pools) to `super().shared_training_state()`."""
        return {
            "networks": {name: {k: v.detach().cpu() for k, v in net.state_dict().items()}
                         for name, net in self.named_networks().items()},
            "optimizers": [optimizer.state_dict() for optimizer in self.optimizers],
            "schedulers": [scheduler.state_dict() for scheduler in self.schedulers],
            "diff_augment": self.diff_augment.state_dict() if self.diff_augment.enabled else None,
        }

    def load_shared_training_state(self, state: dict) -> None:
        """Restore what `shared_training_state` returned; a UserError naming the flags when it
        was saved by another model or from networks of another shape."""
        where = os.path.join(self.save_dir, "*" + STATE_SUFFIX)
        saved_networks = state["networks"]
        if set(saved_networks) != set(self.model_names):
            raise UserError(f"the training state {where} holds the networks {', '.join(sorted(saved_networks))}, "
                            f"but --model {self.opt.model} has {', '.join(self.model_names)}: it was saved by "
                            f"another model; pass the --model it was trained with, or choose another --name.")
        for saved in state["schedulers"]:  # states that recorded no options are checked here
            policy = schedules.policy_of_scheduler_state(saved)
            if policy is not None and policy != self.opt.lr_policy:
                raise UserError(f"--continue_train: the training state {where} holds a --lr_policy {policy} "
                                f"schedule, but this command has --lr_policy {self.opt.lr_policy}; pass --lr_policy "
                                f"{policy} to continue the run, or start a new schedule from its weights with "
                                f"--continue_train --epoch_count N (weights only).")
        for name, net in self.named_networks().items():
            try:
                net.load_state_dict(saved_networks[name])
            except RuntimeError as err:
                raise UserError(checkpoint_files.mismatch_message(where, err, self.opt, self.save_dir,
                                                                  runs_recorded=self.runs_recorded_networks)) from None
        for optimizer, saved in zip(self.optimizers, state["optimizers"], strict=True):
            # how Adam is computed (foreach, built by make_adam) is this run's, not the saved state's: a state
            # saved before foreach was chosen continues bit-identically with it, in fewer operators
            foreach = [group.get("foreach") for group in optimizer.param_groups]
            optimizer.load_state_dict(saved)
            for group, choice in zip(optimizer.param_groups, foreach):
                group["foreach"] = choice
        for scheduler, saved in zip(self.schedulers, state["schedulers"], strict=True):
            scheduler.load_state_dict(saved)
        if self.diff_augment.enabled and state.get("diff_augment"):  # a run that augmented goes on drawing
            self.diff_augment.load_state_dict(state["diff_augment"])

    def rank_training_state(self) -> dict:
        """State that differs between ranks; subclasses add theirs to `super().rank_training_state()`."""
        state = {}
        if self.diff_augment.enabled:
            state["diff_augment"] = self.diff_augment.rank_state_dict()
        return state

    def load_rank_training_state(self, state: dict) -> None:
        """Restore what `rank_training_state` returned."""
        if self.diff_augment.enabled and "diff_augment" in state:
            self.diff_augment.load_rank_state_dict(state["diff_augment"])

    # ------------------------------------------------------------------ checkpoints
    def save_networks(self, epoch) -> None:
        """Write `<epoch>_net_<name>.pth` for every network (main process writes; all ranks must call)."""
        self.write_networks(epoch, self.named_networks())

    def write_networks(self, label: str, nets: dict[str, nn.Module]) -> None:
        """Write `<label>_net_<name>.pth` for each of `nets` (e.g. the moving averages, label
        "latest_ema"), after checking that every rank holds the same weights (all ranks must call)."""
        for name, net in nets.items():
            distributed.check_in_sync(name, net)
        if self.ctx.is_main:
            checkpoint_files.write_networks(self.save_dir, label, nets, self.opt)

    def load_networks(self, epoch) -> None:
        """Load `<epoch>_net_<name>.pth` into each network, with a clear message on mismatch."""
        for name, net in self.named_networks().items():
            path = os.path.join(self.save_dir, f"{epoch}_net_{name}.pth")
            checkpoint_files.read_network(path, net, self.device, self.opt, self.save_dir,
                                          runs_recorded=self.runs_recorded_networks)
            print0(f"loaded the model from {path}")

    def runs_recorded_networks(self, recorded: Mapping[str, Any]) -> bool:
        """Whether this model can call the networks a run's architecture.json `recorded` names as it calls
        them (its `network_calls`; at test time its generators' and encoders'): when it cannot, a checkpoint
        that does not fit names the --model the run was trained with beside its flags."""
        flags = networks.with_flags(self.opt, **recorded)
        for flag, call in self.network_calls.items():
            if not hasattr(flags, flag) or (not self.isTrain and call.role not in (networks.GENERATOR,
                                                                                   networks.ENCODER)):
                continue
            try:
                family = networks.family_of(getattr(flags, flag), call.role)
            except UserError:  # a family of one's own that cannot be found now: nothing to say about it
                continue
            if call.refusal(family, flags):
                return False
        return True
