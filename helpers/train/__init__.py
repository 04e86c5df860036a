"""What runs inside each rank: the worker, the model and its convolution, the data pipeline and sampler, the train step (plain, accumulating, hybrid-parallel) and the profiler session.

May import ``helpers.core`` only; the launcher starts ``helpers.train.worker`` as a process, never the other way round.
"""
