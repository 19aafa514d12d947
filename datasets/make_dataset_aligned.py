"""The reference's path of this tool: `python datasets/make_dataset_aligned.py ...` runs scripts/make_dataset_aligned.py
with the same flags (its documentation is there)."""
import os
import runpy

if __name__ == "__main__":
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "make_dataset_aligned.py"),
                   run_name="__main__")
