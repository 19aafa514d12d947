"""Seeing a training run: the Visualizer the loop talks to (visualizer.py), the LoggerBackend interface
(backend.py), one file per back end (*_backend.py), and the logs and plots they write."""
