"""Start, watch and end a job: msrun and the rank guard, the watcher (progress, failures, hangs), the job registry, input and environment checks, the two-node demo.

May import ``helpers.core`` and ``helpers.train`` (what it prepares before launch: data, the convolution choice).
"""
