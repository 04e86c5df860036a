"""Where MindSpore 2.10 caches a rank's compiled graph, as ``helpers.train.shared_compile`` copies it: pinned here."""

import pytest

from helpers.train import shared_compile as sc
from helpers.train import shared_graphs as sg
from tests.contract.wheel import assert_pinned

PINS = [(sc.RANK_FOLDER, "lib/libmindspore_frontend.so"), (sc.GRAPH_FOLDER, "lib/libmindspore_frontend.so"),
        (sc.HASH_NAME, "lib/libmindspore_frontend.so"), (sc.GRAPH_SUFFIX, "lib/libmindspore_frontend.so"),
        (sc.GRAPH_PREFIX, "lib/libmindspore_backend_common.so"), (sc.LOADED_LOG, "lib/libmindspore_frontend.so"),
        (sc.CACHE_ENABLE_ENV, "graph/api.py"), (sc.CACHE_PATH_ENV, "context.py"),
        (sc.ROLE_ENV, "parallel/cluster/process_entity/_api.py"),
        ('"MS_WORKER"', "parallel/cluster/process_entity/_api.py"),
        # helpers.train.shared_graphs hooks these: the method each executor calls right before a fresh compile
        (f"def {sg.HOOKED}(self", "graph/api.py"), (f"self.{sg.HOOKED}(", "graph/api.py"),
        ("class _CellGraphExecutor", "graph/api.py"), ("class _JitExecutor", "graph/api.py"),
        ("def compile(self, obj, *args, phase='predict'", "graph/api.py"),
        ('def compile(self, method_name, *args, phase=""', "graph/api.py")]


@pytest.mark.parametrize("text, relpath", PINS, ids=[t for t, _ in PINS])
def test_the_cache_layout_the_ranks_share_is_the_wheels(text, relpath):
    assert_pinned(text, relpath)
