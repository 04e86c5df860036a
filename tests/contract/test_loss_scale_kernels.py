"""The overflow-check kernels each chip runs, as the rehearsal's STAND_INS and the recipe name them, pinned to the
wheel's mindspore/nn/wrap/loss_scale.py (TrainOneStepWithLossScaleCell.get_overflow_status and its helpers)."""

import ast
import re

from helpers.core import rehearsal as R
from tests.contract.wheel import assert_pinned, wheel_bytes

LOSS_SCALE = "nn/wrap/loss_scale.py"
ALL_FINITE_KERNEL_LIB = "lib/plugin/ascend/custom_ascendc_910b/op_api/lib/libcust_opapi.so"


def test_gpu_runs_float_status_on_every_gradient():
    assert_pinned(f"grad_overflow = ops.{R.GPU_OVERFLOW_KERNEL}()", LOSS_SCALE)
    assert_pinned("overflow = self._get_distributed_overflow_status_on_infnan_mode(_grad_overflow, compute_output)",
                  LOSS_SCALE)


def test_the_chips_are_told_apart_by_their_soc_features():
    assert_pinned(f'"{R.ASCEND_910A_FEATURE}"', LOSS_SCALE)
    assert_pinned(f'"{R.ASCEND_910B_FEATURE}"', LOSS_SCALE)


def test_saturation_mode_reads_and_clears_the_float_status_register():
    clear, get = R.SATURATION_KERNELS
    assert_pinned(f"get_status = {get}()(status)", LOSS_SCALE)
    assert_pinned(f"clear_status = {clear}()(status)", LOSS_SCALE)
    assert_pinned(f"os.environ.get('{R.SATURATION_MODE_ENV}')", LOSS_SCALE)
    assert_pinned(f'self._ascend_check_overflow_mode == "{R.SATURATION_MODE}"', LOSS_SCALE)


def test_910b_infnan_mode_runs_all_finite_or_is_finite():
    assert_pinned(f"overflow = {R.INFNAN_KERNEL}()(compute_output)", LOSS_SCALE)
    assert_pinned(f"ascend_grad_overflow = ops.{R.INFNAN_FALLBACK_KERNEL}()", LOSS_SCALE)
    runtime_conf, rank_table = R.ALL_FINITE_OFF
    assert_pinned(f'"{runtime_conf}" in runtime_conf', LOSS_SCALE)
    assert_pinned(f'"{rank_table}" in os.environ', LOSS_SCALE)
    assert_pinned(R.INFNAN_KERNEL, ALL_FINITE_KERNEL_LIB)        # shipped as the 910B custom kernel


def _branches() -> str:
    """get_overflow_status's body, as source."""
    src = wheel_bytes(LOSS_SCALE).decode()
    fn = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and n.name == "get_overflow_status")
    return ast.get_source_segment(src, fn)


def test_which_chip_takes_which_branch():
    """GPU first, then 910B (saturation only when asked, else INFNAN), everything else as 910A (saturation)."""
    body = _branches()
    order = ["if self.gpu_target:", "self._get_gpu_overflow_status(", "elif self.ascend_910b_target:",
             f'== "{R.SATURATION_MODE}"', "self._get_ascend_overflow_status_on_saturation_mode(",
             "self._get_ascend_overflow_status_on_infnan_mode(", "else:  # ascend_910a_target",
             "self._get_ascend_overflow_status_on_saturation_mode("]
    at = 0
    for piece in order:
        found = body.find(piece, at)
        assert found >= 0, f"get_overflow_status no longer has {piece!r} after position {at}"
        at = found + len(piece)


def test_stand_ins_and_the_recipe_name_each_chips_kernels():
    from helpers.train import recipe

    row = next(card for card, _, _ in R.STAND_INS if card.startswith(R.OVERFLOW_ROW))
    for text in (row, recipe.cpu_loss_scale_cell.__doc__):
        for name in (R.GPU_OVERFLOW_KERNEL, R.INFNAN_KERNEL, R.INFNAN_FALLBACK_KERNEL, *R.SATURATION_KERNELS):
            assert re.search(rf"\b{name}\b", text), (name, text)
    assert not re.search(rf"\b{R.GPU_OVERFLOW_KERNEL}\b", R.OVERFLOW_CHECKS["Ascend"])
    assert R.SATURATION_KERNELS[1] in R.stand_in_rows("CPU", "Ascend")[2][0]
    assert R.INFNAN_KERNEL not in R.stand_in_rows("CPU", "GPU")[2][0]
