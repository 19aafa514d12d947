"""Compatibility face: `from models.translator import Translator` keeps working; the Translator lives in
models/inference/translator.py."""
from models.inference.translator import Translator  # noqa: F401 (compatibility face)
