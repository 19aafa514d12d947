"""The benchmark's parts (dev/benchmark.py runs them, dev/bench_worker.py measures).

Orchestrator (one process per run): `plan` (what to measure), `environment` (machine, devices,
datasets), `runner` (one worker process per measurement), `measure` (the sections), `derive`
(speed-ups, FLOP/s, targets), `report` (the markdown tables).
Worker (one process per measurement): `stats` (timing and memory), `flops` (FLOPs per network),
`training` (options, model and batches as train.py builds them), `jobs` (the kinds of job).
"""
