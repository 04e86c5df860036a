import numpy as np
import pytest

from helpers.core.fresh_python import FreshCallFailed, call_fresh
from helpers.core.step_times import img_per_s, steady_step_s


def test_steady_step_skips_compilation_and_takes_the_slowest_rank():
    step_s = [[9.0, 1.0, 1.0, 5.0], [9.0, 2.0, 2.0, 2.0]]          # rank 1 slower; one slow step on rank 0
    assert steady_step_s(step_s) == 2.0                             # median of (2, 2, 5)
    assert steady_step_s(step_s, ranks="mean") == 1.5               # median of (1.5, 1.5, 3.5)
    assert steady_step_s([[3.0]]) == 3.0                            # one step only: it is used
    assert steady_step_s(step_s, fastest=True) == 2.0               # the fastest of the slowest-rank steps
    assert img_per_s(step_s, 64) == 32.0


@pytest.mark.parametrize("bad", [dict(step_s=[[]]), dict(step_s=[[1.0]], ranks="median")])
def test_steady_step_refuses_no_steps_and_unknown_reductions(bad):
    with pytest.raises(ValueError):
        steady_step_s(**bad)


def test_a_fresh_interpreter_returns_the_result_or_the_tail_of_its_error():
    assert call_fresh("json:dumps", [1, 2]) == "[1, 2]"
    result, lines = call_fresh("os:getcwd", keep_output=True)
    assert lines[-1].startswith("RESULT ") and result
    with pytest.raises(FreshCallFailed, match="No module named"):
        call_fresh("no_such_module_here:f")
    assert call_fresh("os:getenv", "HOME", unset=("HOME",)) is None
    assert np.isfinite(call_fresh("math:sqrt", 4.0))
