import json

from helpers import conv_choice
from helpers.config import job_config


def test_explicit_choice_is_kept_and_accelerators_use_native():
    assert conv_choice.resolve_conv_impl(job_config("ci", conv_impl="im2col"))[0] == "im2col"
    assert conv_choice.resolve_conv_impl(job_config("gpu8", conv_impl="auto"))[0] == "native"


def test_auto_picks_the_faster_measured_and_caches_it(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_HOME", str(tmp_path))
    calls = []

    def fake_measure(cfg):
        calls.append(cfg)
        return {"native": 0.5, "im2col": 0.2}

    monkeypatch.setattr(conv_choice, "measure", fake_measure)
    cfg = job_config("ci")
    impl, evidence = conv_choice.resolve_conv_impl(cfg)
    assert impl == "im2col" and evidence["seconds_per_step"]["native"] == 0.5
    assert conv_choice.resolve_conv_impl(cfg)[0] == "im2col" and len(calls) == 1, "second call uses the cache"
    assert json.loads((tmp_path / "runs" / "conv_choice.json").read_text())


def test_a_real_step_is_timed():
    assert conv_choice.time_train_step("resnet18", 0.125, "small", 16, 2, "im2col", repeats=1) > 0
