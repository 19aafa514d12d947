"""CycleGAN.ipynb and pix2pix.ipynb, the reference's Colab entry points: they run from top to bottom for
real, in a Jupyter kernel of this Python, offline, with tiny settings through their environment variables
and every file they write under tmp_path; they show the data, the loss and validation curves and the test
results as pictures. The committed files are valid nbformat 4 without outputs."""
from __future__ import annotations

import base64
import io
import os
from pathlib import Path

import nbformat
import pytest
from ipykernel.kernelspec import write_kernel_spec
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from PIL import Image

from conftest import ROOT

NOTEBOOKS = ["CycleGAN.ipynb", "pix2pix.ipynb"]

# A few seconds per command on 2 CPU cores: 32 px, 8 training images, one epoch, 8 filters. resnet_6blocks
# because the U-Nets need sides of 128 px and more.
TINY_SETTINGS = {
    "NOTEBOOK_IMAGE_SIZE": "32",
    "NOTEBOOK_EPOCHS": "1",
    "NOTEBOOK_EPOCHS_DECAY": "0",
    "NOTEBOOK_BATCH_SIZE": "2",
    "NOTEBOOK_NGF": "8",
    "NOTEBOOK_NETG": "resnet_6blocks",
    "NOTEBOOK_NUM_TRAIN": "8",
    "NOTEBOOK_NUM_TEST": "4",
    "NOTEBOOK_PRINT_FREQ": "2",
    "NOTEBOOK_FLAGS": "--num_threads 0",
}


def python3_kernel(folder: Path) -> AsyncKernelManager:
    """A manager for the kernel "python3" that runs this Python (sys.executable, so .venv's), whatever other
    "python3" kernel Jupyter would find on this machine (a user's, another environment's)."""
    write_kernel_spec(folder / "python3")
    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(folder)]))


def tagged(notebook: nbformat.NotebookNode, tag: str) -> nbformat.NotebookNode:
    [cell] = [cell for cell in notebook.cells if tag in cell.metadata.get("tags", [])]
    return cell


def pictures(cell: nbformat.NotebookNode) -> list[Image.Image]:
    """The PNG images a code cell displayed."""
    return [Image.open(io.BytesIO(base64.b64decode(output["data"]["image/png"])))
            for output in cell.outputs if "image/png" in output.get("data", {})]


def printed(cell: nbformat.NotebookNode) -> str:
    return "".join(output.get("text", "") for output in cell.outputs if output.output_type == "stream")


@pytest.mark.slow
@pytest.mark.parametrize("filename", NOTEBOOKS)
def test_notebook_runs_top_to_bottom_offline_and_shows_data_curves_and_results(
        filename: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    notebook = nbformat.read(ROOT / filename, as_version=4)
    work = tmp_path / "work"
    name = f"notebook_test_{filename.split('.')[0].lower()}"
    env = {key: value for key, value in os.environ.items() if not key.startswith("NOTEBOOK_")}
    env.update(TINY_SETTINGS, NOTEBOOK_WORK_DIR=str(work), NOTEBOOK_NAME=name, OMP_NUM_THREADS="1",
               IMG2IMG_OFFLINE="1",  # nothing is downloaded
               IPYTHONDIR=str(tmp_path / "ipython"))  # the kernel's profile, not the user's
    if filename == "CycleGAN.ipynb":  # its validation scores FID/KID: seeded Inception weights, found offline
        env["TORCH_HOME"] = str(request.getfixturevalue("inception_torch_home"))
    client = NotebookClient(notebook, km=python3_kernel(tmp_path / "kernels"), timeout=300,
                            resources={"metadata": {"path": str(ROOT)}})  # run where the notebook is, as Jupyter does
    client.execute(env=env, cleanup_kc=True)  # raises CellExecutionError, naming the cell, if any cell fails

    assert not [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
                if output.output_type == "error"]
    install = next(cell for cell in notebook.cells if "unmet_requirements" in cell.source)
    assert "nothing to install" in printed(install)  # in a checkout with the requirements: no pip, no clone
    assert len(pictures(tagged(notebook, "pictures"))) == 1  # the training images
    curves = pictures(tagged(notebook, "curves"))
    assert len(curves) == 2, printed(tagged(notebook, "curves"))  # loss_plot.png and metrics_plot.png
    [results] = pictures(tagged(notebook, "results"))  # the grid of test results
    assert results.width > 300 and results.height > 100

    run, results_page = work / "checkpoints" / name, work / "results" / name / "test_latest" / "index.html"
    assert (run / "loss_plot.png").is_file() and (run / "metrics_plot.png").is_file() and results_page.is_file()
    assert not (ROOT / "checkpoints" / name).exists() and not (ROOT / "results" / name).exists()


@pytest.mark.parametrize("filename", NOTEBOOKS)
def test_committed_notebook_is_valid_nbformat_4_without_outputs(filename: str) -> None:
    notebook = nbformat.read(ROOT / filename, as_version=nbformat.NO_CONVERT)
    nbformat.validate(notebook)
    assert notebook.nbformat == 4 and notebook.metadata.kernelspec.name == "python3"
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.outputs == [] and cell.execution_count is None for cell in code)
    for tag in ("pictures", "curves", "results"):
        tagged(notebook, tag)  # the cells the run above checks exist, once each
    # Settings come from the environment, so that the test above can make the run tiny.
    assert all(key in "".join(cell.source for cell in code) for key in TINY_SETTINGS)
