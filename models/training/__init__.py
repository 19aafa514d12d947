"""How a model is trained, apart from what the model computes.

    engine.py            TrainingEngine: the networks as training calls them, and `train_step`, one step
                         from the batch to the optimizers, readable top to bottom
    step.py              TrainingStep: what a model's `optimize_parameters(step)` is handed
    network_variants.py  each network as training calls it (DDP, --compile), beside the plain module
    accumulation.py, ema.py, loss_watch.py, schedules.py, compile_probe.py: the engine's small parts
    checkpointer.py      the one object the loop talks to for saving and resuming (with
                         training_state.py, best_checkpoint.py)
    validator.py         --val_freq: the held-out split translated as inference translates it
    run_control.py       one run per folder, stopping cleanly on a signal

It looks down at the models' families (models/*.py), their losses and networks, and at
models/inference/ (validation translates as inference does); inference never looks up at it.
"""
