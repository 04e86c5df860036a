"""The wheel the pins were read from is the one installed: MindSpore's version, its build commit and wheel tag, and
each file the pins read byte for byte (tests/contract/pinned_wheel.json, the one place that names them)."""

from tests.contract.wheel import installed_build, pinned, recheck_note, record_hash, wheel_bytes


def test_mindspore_is_the_version_the_pins_were_read_from(record_property):
    import mindspore

    record_property("mindspore_version", mindspore.__version__)
    assert mindspore.__version__ == pinned()["version"], f"MindSpore {mindspore.__version__} is installed: " \
        + recheck_note()


def test_the_build_and_wheel_tag_are_recorded_and_the_same(record_property):
    """The commit the wheel was built from (``mindspore/.commit_id``) and its WHEEL tag. This copy says
    ``py3-none-any``, where pip on a server fetches a platform wheel (``cp311-cp311-...``): a platform wheel of the
    same commit passes the file check below when its files are the same bytes; then record its tag."""
    build = installed_build()
    for key in ("version", "commit", "tag"):
        record_property(f"mindspore_{key}", build[key])
    assert build["commit"], "mindspore/.commit_id names no [sha1]"
    assert (build["commit"], build["tag"]) == (pinned()["commit"], pinned()["tag"]), \
        f"build {build['commit']}, tag {build['tag']} is installed: " + recheck_note()


def test_each_pinned_file_is_in_the_wheels_record_and_unaltered():
    """RECORD lists every pinned file with the pinned hash, and the file on disk has it (a patched plugin, for
    instance the patchelf fix of the GPU pre-flight, shows here)."""
    record = installed_build()["record"]
    files = pinned()["files"]
    assert files
    differ = sorted(f for f, digest in files.items() if record.get(f) != digest)
    assert not differ, f"RECORD's hash differs for {', '.join(differ)}: " + recheck_note()
    for relpath, digest in files.items():
        assert record_hash(wheel_bytes(relpath)) == digest
