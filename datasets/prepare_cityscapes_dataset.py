"""The reference's path of this tool: `python datasets/prepare_cityscapes_dataset.py ...` runs scripts/prepare_cityscapes_dataset.py
with the same flags (its documentation is there)."""
import os
import runpy

if __name__ == "__main__":
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "prepare_cityscapes_dataset.py"),
                   run_name="__main__")
