"""benchmarks.startup: --empty-env pairs become the empty job's environment; MindSpore's log lines time init()."""

import time

import pytest

from benchmarks.startup import ADDRESS_SLEEP, RANK_OUT_OF_BUILD, TOPOLOGY_BUILT, cluster_wait, parse_env
from helpers.core.errors import ConfigError


def test_pairs_become_variables_and_a_value_may_hold_an_equals_sign():
    assert parse_env(["MS_RETRY_INTERVAL_LOWER=3", "X=a=b", "EMPTY="]) == {
        "MS_RETRY_INTERVAL_LOWER": "3", "X": "a=b", "EMPTY": ""}


@pytest.mark.parametrize("pair", ["MS_RETRY_INTERVAL_LOWER", "=3"])
def test_a_pair_without_a_name_or_an_equals_sign_is_refused_by_name(pair):
    with pytest.raises(ConfigError, match="--empty-env"):
        parse_env([pair])


def _log(path, lines):
    stamp = "[INFO] DISTRIBUTED(1,7f,python):2026-12-05-20:13:"
    path.write_text("".join(f"{stamp}{t} [x.cc:1] F] {text}\n" for t, text in lines))


def test_the_cluster_wait_is_read_from_mindspores_log_lines(tmp_path):
    _log(tmp_path / "scheduler.log", [("21.222.141", TOPOLOGY_BUILT[0] + ".")])
    _log(tmp_path / "worker_0.log", [("22.722.141", RANK_OUT_OF_BUILD[0])])
    _log(tmp_path / "worker_1.log", [("21.722.141", RANK_OUT_OF_BUILD[0]),
                                    ("21.725.000", f"Waiting for the address of rank R_0{ADDRESS_SLEEP[0]}19 times.")])
    t_built = time.mktime(time.strptime("2026-12-05-20:13:21", "%Y-%m-%d-%H:%M:%S")) + 0.222141
    w = cluster_wait(tmp_path, [t_built + 1.5, t_built + 4.0])
    assert w["last_rank_out_of_build_s"] == pytest.approx(1.5)
    assert w["all_ranks_through_init_s"] == pytest.approx(4.0)
    assert w["address_sleeps"] == 1
