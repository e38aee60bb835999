import json

import pytest

from bertfactory.io import AtomicFile, atomic_write_json, content_hash, publish_dir, sha256_file


def test_atomic_write_leaves_old_file_on_crash(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with AtomicFile(target) as tmp:
            tmp.write_bytes(b"half-written")
            raise RuntimeError("crash mid-write")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]  # no temp file left behind


def test_atomic_write_json_and_hashes(tmp_path):
    p = tmp_path / "a" / "x.json"
    atomic_write_json(p, {"b": 1, "a": [1, 2]})
    assert json.loads(p.read_text()) == {"a": [1, 2], "b": 1}
    assert len(sha256_file(p)) == 64
    assert content_hash({"a": 1, "b": 2}) == content_hash({"b": 2, "a": 1})
    assert content_hash({"a": 1}) != content_hash({"a": 2})


def test_publish_dir_replaces_whole_directory(tmp_path):
    final = tmp_path / "shards"
    final.mkdir()
    (final / "stale.arrow").write_text("old")
    staging = tmp_path / ".staging"
    staging.mkdir()
    (staging / "part-0.arrow").write_text("new")
    publish_dir(staging, final)
    assert sorted(p.name for p in final.iterdir()) == ["part-0.arrow"]
    assert not staging.exists()


def test_atomic_writes_get_the_mode_of_an_ordinary_new_file(tmp_path):
    import os
    import stat

    from bertfactory.io import AtomicFile, atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        with AtomicFile(tmp_path / "b.bin") as tmp:
            tmp.write_bytes(b"y")
    finally:
        os.umask(old)
    for name in ("a.txt", "b.bin"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name


def test_atomic_file_without_durability_renames_but_never_syncs(tmp_path, monkeypatch):
    import os

    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    with AtomicFile(tmp_path / "spill.arrow", durable=False) as tmp:
        tmp.write_bytes(b"rows")
        assert not (tmp_path / "spill.arrow").exists()
    assert (tmp_path / "spill.arrow").read_bytes() == b"rows" and synced == []
    with AtomicFile(tmp_path / "shard.arrow") as tmp:
        tmp.write_bytes(b"rows")
    assert len(synced) == 2  # the file, then its directory


def test_decode_utf8_names_the_file_line_and_byte():
    import pytest

    from bertfactory.errors import InputError
    from bertfactory.io import decode_utf8

    assert decode_utf8("a\nbé\n".encode(), "x.txt") == "a\nbé\n"
    with pytest.raises(InputError, match=r"^x\.txt:3: not valid UTF-8 \(invalid start byte at byte 4\); a hint$"):
        decode_utf8(b"a\nb\n\xffc\n", "x.txt", hint="; a hint")


def test_the_umask_is_read_without_setting_it(monkeypatch):
    # setting it to 0 and back is process-wide: a thread creating a folder in between got it world-writable
    import os

    from bertfactory.io import default_file_mode, process_umask

    expected = os.umask(0o027)
    try:
        def refuse(mask):
            raise AssertionError("os.umask called")

        monkeypatch.setattr(os, "umask", refuse)
        assert process_umask() == 0o027
        assert default_file_mode() == 0o640
    finally:
        monkeypatch.undo()
        os.umask(expected)
