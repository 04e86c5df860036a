"""Checkers for the exercises at the end of each chapter: one function per exercise.

Each checker takes the participant's ``answer``, works the expected value out with the course's own
helpers (the sampler, the balance metrics, the memory planner, the strategy layout, the profile
parser), prints one line that starts with ``right``, ``wrong, because ...`` or ``not attempted yet``, and
returns ``True`` only for a right answer. ``None`` (the placeholder in the notebooks) is "not attempted
yet"; an answer of the wrong shape is "wrong", never an exception. No checker starts a job: each runs in
well under a second or two in the notebook kernel (chapter 01's imports MindSpore's dataset module).

Strict on purpose: an answer is right only when it is the exact value in the type the prompt asks for
(a tuple where the prompt writes one, ``int`` where it asks for a count or a rank; numpy integers count
as ints, because the course's helpers return them). Each typical mistake (off by one, swapped tuple,
global instead of per-card batch, a split that fits but is not the one asked for, pooled instead of
per-rank mean, a string, a bool, a float, a value rounded coarser than the stated precision) is rejected
with a hint that names it.

The inputs each exercise is about are module constants, so the notebook shows the same numbers the
checker uses. The checkers live in one module per chapter (``helpers/exercises/ch00.py`` ..
``_ch04.py``; reading answers: ``helpers/exercises/common.py``); import them from here. Worked answers:
``solutions/ch00.py`` .. ``solutions/ch04.py``.
"""

from __future__ import annotations

from helpers.exercises.ch00 import (EX00_NODES, EX00_WORKER_ORDINAL, EX00_WORKERS_PER_NODE, EX00_WORLD_SIZE,
                                    check_00_rank_and_size, check_00_two_nodes)
from helpers.exercises.ch01 import (EX01_BATCH_PER_RANK, EX01_CLASSES, EX01_PER_CLASS, EX01_RANK, EX01_RANKS,
                                    check_01_rank3_histogram, check_01_worst_step_classes, ex01_labels)
from helpers.exercises.ch02 import (EX02_ARCH, EX02_CAPACITY_GB, EX02_CARDS, EX02_GLOBAL_BATCH,
                                    EX02_IMAGE_SIZE, check_02_accumulation)
from helpers.exercises.ch03 import (EX03_CLASSES, EX03_DP, EX03_FEATURES, EX03_MP, EX03_RANK,
                                    check_03_layout_bytes, check_03_same_slice)
from helpers.exercises.ch04 import (EX04_BUCKET_KB, EX04_GRAD_KB, EX04_PROFILE, EX04_SHARE_TOL,
                                    check_04_allreduce_calls, check_04_comm_share, ex04_job_profile)

CHECKERS = {
    "00": (check_00_rank_and_size, check_00_two_nodes),
    "01": (check_01_rank3_histogram, check_01_worst_step_classes),
    "02": (check_02_accumulation,),
    "03": (check_03_layout_bytes, check_03_same_slice),
    "04": (check_04_allreduce_calls, check_04_comm_share),
}

__all__ = [
    "CHECKERS", "ex01_labels", "ex04_job_profile",
    *(f.__name__ for fs in CHECKERS.values() for f in fs),
    "EX00_WORLD_SIZE", "EX00_WORKER_ORDINAL", "EX00_NODES", "EX00_WORKERS_PER_NODE",
    "EX01_CLASSES", "EX01_PER_CLASS", "EX01_RANKS", "EX01_BATCH_PER_RANK", "EX01_RANK",
    "EX02_ARCH", "EX02_IMAGE_SIZE", "EX02_GLOBAL_BATCH", "EX02_CARDS", "EX02_CAPACITY_GB",
    "EX03_FEATURES", "EX03_CLASSES", "EX03_DP", "EX03_MP", "EX03_RANK",
    "EX04_GRAD_KB", "EX04_BUCKET_KB", "EX04_PROFILE", "EX04_SHARE_TOL",
]
