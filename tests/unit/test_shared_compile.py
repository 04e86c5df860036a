"""``helpers.train.shared_compile``: which ranks take rank 0's graph, and that they take it only once it is whole."""

import os
import time
import stat

import numpy as np
import pytest

from helpers.core.config import job_config
from helpers.train import shared_compile as sc

ENV = {sc.CACHE_ENABLE_ENV: "1", sc.ROLE_ENV: "MS_WORKER"}


def cfg(**kw):
    return job_config("ci", name="t", chapter="t", **kw)


def env(tmp_path):
    return {**ENV, sc.CACHE_PATH_ENV: str(tmp_path / "cache")}


def write_rank0(tmp_path, mode=0o400) -> tuple:
    graph, digest = sc.graph_files(str(tmp_path / "cache"), 0, "MS_WORKER")
    graph.parent.mkdir(parents=True)
    graph.write_bytes(b"graph zero")
    digest.write_bytes(b"h" * 64)
    for f in (graph, digest):
        os.chmod(f, mode)
    return graph, digest


@pytest.mark.parametrize("change, rank, world", [
    ({}, 0, 8), ({}, 1, 1), (dict(device_target="GPU"), 1, 8), (dict(strategy_file="s.ckpt"), 1, 8),
    (dict(local_world_size=4), 1, 8)])
def test_only_other_ranks_of_a_one_machine_data_parallel_cpu_job_take_the_graph(tmp_path, change, rank, world):
    assert sc.applies(cfg(), 1, 8, env(tmp_path))
    assert not sc.applies(cfg(**change), rank, world, env(tmp_path))
    assert not sc.applies(cfg(), 1, 8, {**env(tmp_path), sc.CACHE_ENABLE_ENV: "0"}), "no cache, nothing to share"
    assert not sc.applies(cfg(), 1, 8, {**env(tmp_path), sc.SHARE_ENV: "0"}), "turned off"


def test_the_graph_is_copied_read_only_and_the_hash_last(tmp_path, monkeypatch):
    write_rank0(tmp_path)
    order = []
    real = os.replace
    monkeypatch.setattr(sc.os, "replace", lambda a, b: (order.append(os.path.basename(b)), real(a, b)))
    text = sc.take_leader_graph(cfg(), 3, 8, env(tmp_path))
    graph, digest = sc.graph_files(str(tmp_path / "cache"), 3, "MS_WORKER")
    assert text.startswith("loaded rank 0's graph") and graph.read_bytes() == b"graph zero"
    assert order == [graph.name, digest.name] == ["MS_WORKERcompile_cache_0.mindir",
                                                  "MS_WORKERcompile_dependency.hash"]
    assert not graph.stat().st_mode & stat.S_IWUSR and not digest.stat().st_mode & stat.S_IWUSR
    assert sorted(p.name for p in graph.parent.iterdir()) == sorted(order), "no temporary file left"


def test_a_graph_still_being_written_is_not_taken_and_the_rank_compiles_itself(tmp_path):
    write_rank0(tmp_path, mode=0o600)      # MindSpore makes a file read-only once it is closed
    text = sc.take_leader_graph(cfg(), 2, 8, env(tmp_path), wait_s=0.5)
    assert text.startswith("compiled itself") and not (tmp_path / "cache" / "rank_2").exists()


def test_a_rank_with_its_own_cached_graph_keeps_it(tmp_path):
    write_rank0(tmp_path)
    graph, digest = sc.graph_files(str(tmp_path / "cache"), 5, "MS_WORKER")
    graph.parent.mkdir(parents=True)
    graph.write_bytes(b"own")
    digest.write_bytes(b"own hash")
    assert sc.take_leader_graph(cfg(), 5, 8, env(tmp_path)) == "own cache" and graph.read_bytes() == b"own"


# ---------------------------------------------------------------- every graph (helpers.train.shared_graphs)
def write_graph(tmp_path, rank, n, mode=0o400):
    graph, digest = sc.graph_files(str(tmp_path / "cache"), rank, "MS_WORKER", n)
    graph.parent.mkdir(parents=True, exist_ok=True)
    graph.write_bytes(f"graph {n}".encode())
    if not digest.exists():
        digest.write_bytes(b"h" * 64)
        os.chmod(digest, 0o400)
    os.chmod(graph, mode)
    return graph


def test_a_later_graph_is_taken_when_rank_0_compiled_the_same_thing(tmp_path):
    from helpers.train import shared_graphs as sg

    write_graph(tmp_path, 0, 0), write_graph(tmp_path, 0, 1)
    write_graph(tmp_path, 4, 0)                               # rank 4 compiled (or took) its graph 0 already
    key = sg.graph_key("EvalNet", [np.zeros((16, 3, 32, 32), np.float32)])
    assert key == "EvalNet((16, 3, 32, 32):float32)"
    sg.publish(tmp_path, 1, key)
    assert sg.take(cfg(), 4, 8, tmp_path, 1, key, env(tmp_path)).startswith("loaded rank 0's graph")
    mine = sc.graph_files(str(tmp_path / "cache"), 4, "MS_WORKER", 1)[0]
    assert mine.read_bytes() == b"graph 1"
    assert sg.take(cfg(), 4, 8, tmp_path, 1, key, env(tmp_path)) == "own cache"


def test_a_rank_compiling_something_else_than_rank_0_compiles_itself(tmp_path):
    from helpers.train import shared_graphs as sg

    write_graph(tmp_path, 0, 1)
    sg.publish(tmp_path, 1, "EvalNet((16, 3, 32, 32):float32)")
    text = sg.take(cfg(), 2, 8, tmp_path, 1, "EvalNet((8, 3, 32, 32):float32)", env(tmp_path))
    assert text.startswith("compiled itself: rank 0's graph 1 is") and not (tmp_path / "cache" / "rank_2").exists()


def test_no_wait_for_a_graph_rank_0_moved_past_without_writing(tmp_path):
    from helpers.train import shared_graphs as sg

    sg.publish(tmp_path, 3, "A()")
    sg.publish(tmp_path, 4, "B()")                             # rank 0 compiles its next graph: no file 3 will come
    t0 = time.monotonic()
    text = sg.take(cfg(), 1, 8, tmp_path, 3, "A()", env(tmp_path), wait_s=30)
    assert text.startswith("compiled itself") and time.monotonic() - t0 < 5
    assert sg.take(cfg(), 1, 8, tmp_path, 9, "C()", env(tmp_path), wait_s=0.3).startswith("compiled itself: rank 0 "
                                                                                          "compiled no graph 9")


def test_after_a_cell_only_ranks_with_rank_0s_graph_count_share(tmp_path):
    from helpers.train import shared_graphs as sg

    assert sg.same_start(tmp_path, 0, 2)                          # rank 0 says how many graphs its cell compiled
    assert sg.same_start(tmp_path, 3, 2, wait_s=1)                # the same count: its next graph has rank 0's number
    assert not sg.same_start(tmp_path, 5, 1, wait_s=1)            # one graph fewer: it compiles its own graphs
    t0 = time.monotonic()
    assert not sg.same_start(tmp_path / "other", 1, 0, wait_s=0.3) and time.monotonic() - t0 < 3   # no rank 0
