"""Worked answers to the chapter exercises (``helpers.exercises``); ``tests/unit/test_exercises.py`` checks them."""
