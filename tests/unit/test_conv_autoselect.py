import json

from helpers.train import conv_autoselect
from helpers.core.config import job_config


def test_explicit_choice_is_kept_and_accelerators_use_native():
    assert conv_autoselect.resolve_conv_impl(job_config("ci", conv_impl="im2col"))[0] == "im2col"
    assert conv_autoselect.resolve_conv_impl(job_config("gpu8", conv_impl="auto"))[0] == "native"


def test_auto_picks_the_faster_measured_and_caches_it(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_HOME", str(tmp_path))
    calls = []

    def fake_measure(cfg):
        calls.append(cfg)
        return {"native": 0.5, "im2col": 0.2}

    monkeypatch.setattr(conv_autoselect, "measure", fake_measure)
    cfg = job_config("ci")
    impl, evidence = conv_autoselect.resolve_conv_impl(cfg)
    assert impl == "im2col" and evidence["seconds_per_step"]["native"] == 0.5
    assert conv_autoselect.resolve_conv_impl(cfg)[0] == "im2col" and len(calls) == 1, "second call uses the cache"
    assert json.loads((tmp_path / "runs" / "conv_choice.json").read_text())


def test_a_real_step_is_timed():
    assert conv_autoselect.time_train_step("resnet18", 0.125, "small", 16, 2, "im2col", repeats=1) > 0


def test_a_corrupt_conv_choice_cache_is_measured_again_and_rewritten(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_HOME", str(tmp_path))
    cache = tmp_path / "runs" / "conv_choice.json"
    cache.parent.mkdir()
    cache.write_text('{"half a file written when the disk filled')
    monkeypatch.setattr(conv_autoselect, "measure", lambda cfg: {"native": 0.5, "im2col": 0.2})
    assert conv_autoselect.resolve_conv_impl(job_config("ci"))[0] == "im2col"
    assert len(json.loads(cache.read_text())) == 1
    assert [p.name for p in cache.parent.iterdir()] == ["conv_choice.json"], "a temporary file was left"


def test_conv_choice_keeps_what_another_run_wrote_meanwhile(tmp_path):
    path = tmp_path / "conv_choice.json"
    conv_autoselect.write_cache_entry(path, "a", {"seconds_per_step": {"native": 1.0}})
    conv_autoselect.write_cache_entry(path, "b", {"seconds_per_step": {"im2col": 1.0}})
    assert sorted(conv_autoselect.read_cache(path)) == ["a", "b"]
