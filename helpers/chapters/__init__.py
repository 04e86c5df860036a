"""The steps of each notebook, one module per chapter: run its jobs, build its tables and figures, so the notebook reads as prose, a parameters cell, calls and plots.

May import every other helpers package; only the notebooks (and their tests) import it.
"""
