"""Checkers for the exercises at the end of each chapter: one function per exercise.

Each checker takes the participant's ``answer``, works the expected value out with the course's own helpers,
prints one line that starts with ``right``, ``wrong, because ...`` or ``not attempted yet``, and returns ``True``
only for a right answer. ``None`` (the notebooks' placeholder) is "not attempted yet"; an answer of the wrong
shape is "wrong", never an exception. No checker starts a job. Strict on purpose: an answer is right only as the
exact value in the type the prompt asks for (numpy integers count as ints); each typical mistake is rejected
with a hint that names it. The inputs of each exercise are module constants, so the notebook shows the numbers
the checker uses. ``CELL_CHECKERS`` judge an edit to a chapter's ``%%ranks`` cell: ``(answer, on_ranks)``, the
cell's ``JobResult``. Checkers live in ``helpers/exercises/chNN.py`` (reading answers: ``common.py``); import them
from here. Worked answers: ``solutions/ch00.py`` .. ``solutions/ch04.py``.
"""

from __future__ import annotations

from helpers.exercises.ch00 import (EX00_NODES, EX00_SUM_KEY, EX00_WORKER_ORDINAL, EX00_WORKERS_PER_NODE,
                                    EX00_WORLD_SIZE, check_00_rank_and_size, check_00_two_nodes,
                                    check_00_without_reducer)
from helpers.exercises.ch01 import (EX01_BATCH_PER_RANK, EX01_CLASSES, EX01_PER_CLASS, EX01_RANK, EX01_RANKS,
                                    EX01_SHARD_KEY, check_01_block_shard, check_01_rank3_histogram,
                                    check_01_worst_step_classes, ex01_labels)
from helpers.exercises.ch02 import (EX02_ARCH, EX02_CAPACITY_GB, EX02_CARDS, EX02_GLOBAL_BATCH,
                                    EX02_IMAGE_SIZE, EX02_MEMORY_KEYS, EX02_MICRO, check_02_accumulation,
                                    check_02_micro_memory)
from helpers.exercises.ch03 import (EX03_CLASSES, EX03_DP, EX03_FEATURES, EX03_MP, EX03_RANK, EX03_RATIO_KEY,
                                    check_03_layout_bytes, check_03_same_slice, check_03_without_mp_division)
from helpers.exercises.ch04 import (EX04_BUCKET_KB, EX04_CALLS_KEY, EX04_GRAD_KB, EX04_PROFILE, EX04_SHARE_TOL,
                                    check_04_allreduce_calls, check_04_comm_share, check_04_unfused_calls,
                                    ex04_job_profile)

# checkers of an edit to the chapter's %%ranks cell: (answer, run), run the cell's JobResult (on_ranks)
CELL_CHECKERS = {
    "00": (check_00_without_reducer,),
    "01": (check_01_block_shard,),
    "02": (check_02_micro_memory,),
    "03": (check_03_without_mp_division,),
    "04": (check_04_unfused_calls,),
}
# every checker by chapter, in the notebook's order: (answer), or (answer, run) for those in CELL_CHECKERS
CHECKERS = {
    "00": (check_00_rank_and_size, check_00_two_nodes, *CELL_CHECKERS["00"]),
    "01": (check_01_rank3_histogram, check_01_worst_step_classes, *CELL_CHECKERS["01"]),
    "02": (check_02_accumulation, *CELL_CHECKERS["02"]),
    "03": (check_03_layout_bytes, check_03_same_slice, *CELL_CHECKERS["03"]),
    "04": (check_04_allreduce_calls, check_04_comm_share, *CELL_CHECKERS["04"]),
}

__all__ = [
    "CHECKERS", "CELL_CHECKERS", "ex01_labels", "ex04_job_profile",
    *(f.__name__ for fs in CHECKERS.values() for f in fs),
    "EX00_WORLD_SIZE", "EX00_WORKER_ORDINAL", "EX00_NODES", "EX00_WORKERS_PER_NODE", "EX00_SUM_KEY",
    "EX01_CLASSES", "EX01_PER_CLASS", "EX01_RANKS", "EX01_BATCH_PER_RANK", "EX01_RANK", "EX01_SHARD_KEY",
    "EX02_ARCH", "EX02_IMAGE_SIZE", "EX02_GLOBAL_BATCH", "EX02_CARDS", "EX02_CAPACITY_GB", "EX02_MEMORY_KEYS", "EX02_MICRO",
    "EX03_FEATURES", "EX03_CLASSES", "EX03_DP", "EX03_MP", "EX03_RANK", "EX03_RATIO_KEY",
    "EX04_GRAD_KB", "EX04_BUCKET_KB", "EX04_PROFILE", "EX04_SHARE_TOL", "EX04_CALLS_KEY",
]
