"""Start, watch and end a job: msrun, the rank guard, the watcher, the registry, each launch's checks, two-node demo.

May import ``helpers.core`` and ``helpers.train`` (what it prepares before launch: data, the convolution choice).
"""
