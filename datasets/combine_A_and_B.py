"""The reference's path of this tool: `python datasets/combine_A_and_B.py ...` runs scripts/combine_A_and_B.py
with the same flags (its documentation is there)."""
import os
import runpy

if __name__ == "__main__":
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "combine_A_and_B.py"),
                   run_name="__main__")
