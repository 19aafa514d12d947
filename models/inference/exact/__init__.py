"""Exact translation of inputs of any size in bounded memory (executor.py explains how).

    executor.py     translate_exactly, ExactBudget: the plan and the tiles
    graph.py        the generator traced as a graph of operations, with every result's full size
    regions.py      what each operation reads to compute one region of its output
    statistics.py   a normalisation's statistics over a whole map, gathered region by region
    storage.py      the maps kept whole: in memory, or in scratch files read by regions
"""
from models.inference.exact.executor import DEFAULT_EXACT_MEMORY, ExactBudget, prepare, translate_exactly

__all__ = ["DEFAULT_EXACT_MEMORY", "ExactBudget", "prepare", "translate_exactly"]
