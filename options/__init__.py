"""Command-line options: `BaseOptions` (shared), `TrainOptions`, `TestOptions`."""
