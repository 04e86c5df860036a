"""Notebook output: tables and Markdown, figures, and the recorded results file of a chapter.

May import ``helpers.core`` only.
"""
