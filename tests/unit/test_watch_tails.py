"""The log tails a failed job shows: a lost node's own logs (not node 0's), and no harmless MindSpore ERROR lines."""

from helpers.job.watch import log_tail, node_log_tail

NOISE = "[ERROR] ME(3725:1,MainProcess):2026-12-06 [mindspore/runtime/device.py:25] CPU device is not supported. " \
        "Please use correct device"


def test_a_lost_nodes_tail_is_its_own_msrun_and_worker_logs(tmp_path):
    (tmp_path / "msrun0.log").write_text("node 0 started\n")
    (tmp_path / "msrun1.log").write_text("Start worker process with rank id:2\nnode 1 last words\n")
    (tmp_path / "logs" / "node1").mkdir(parents=True)
    (tmp_path / "logs" / "node0").mkdir()
    (tmp_path / "logs" / "node0" / "worker_0.log").write_text("rank 0 line\n")
    (tmp_path / "logs" / "node1" / "worker_3.log").write_text(f"{NOISE}\nrank 3 step 2\n")
    (tmp_path / "logs" / "node1" / "worker_2.log").write_text("rank 2 step 2\n")
    tail = node_log_tail(tmp_path, 1, "n2")
    assert "node 1 last words" in tail and "rank 2 step 2" in tail and "rank 3 step 2" in tail
    assert "node 0" not in tail and "rank 0" not in tail and "CPU device is not supported" not in tail
    assert tail.index("[msrun1.log]") < tail.index("[logs/node1/worker_2.log]") < tail.index("worker_3.log")


def test_a_lost_node_whose_logs_are_not_here_says_so(tmp_path):
    (tmp_path / "msrun0.log").write_text("node 0 started\n")
    tail = node_log_tail(tmp_path, 1, "n2")
    assert tail.startswith("nothing of node n2 could be read here") and "not shared" in tail


def test_a_ranks_tail_leaves_out_mindsporess_harmless_cpu_error(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "worker_1.log").write_text(f"start\n{NOISE}\nTraceback: boom\n")
    assert log_tail(tmp_path, 1) == "start\nTraceback: boom"
