"""What each chapter teaches and measures: shard statistics and classes seen (01), memory runs (02), strategy files and hybrid parallel (03), profiling (04).

May import ``helpers.core``, ``helpers.output``, ``helpers.train`` and ``helpers.job``; nothing imports it but the notebooks, ``conclusions``, ``exercises`` and the benchmarks.
"""
