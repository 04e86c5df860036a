"""``python -m benchmarks <name>``: a benchmark that only prints its JSON is saved with the machine it ran on."""

import json
import types

import benchmarks.__main__ as bm


def test_printed_json_is_saved_with_the_machine(tmp_path, monkeypatch):
    fake = types.SimpleNamespace(main=lambda argv: print(json.dumps({"benchmark": "fake", "ratio": 0.5})))
    monkeypatch.setattr(bm.importlib, "import_module", lambda name: fake)
    monkeypatch.setattr(bm, "RESULTS_DIR", tmp_path)
    monkeypatch.setitem(bm.BENCHMARKS, "fake", False)
    bm.run_one("fake", None, [])
    saved = json.loads((tmp_path / "fake.json").read_text())
    assert saved["ratio"] == 0.5
    assert saved["machine"]["cores"] >= 1 and saved["machine"]["cpu"] and saved["machine"]["date_utc"]
