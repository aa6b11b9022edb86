"""The one rule for outputs (textebm.outputs): refuse what textebm did not write, replace only its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from textebm.errors import TextebmError
from textebm.outputs import MARKER, check_output_dir, check_output_file, output_dir, read_marker


def _write(tmp: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text)


def test_new_folder_is_written_whole_with_a_marker(tmp_path):
    out = tmp_path / "report"
    with output_dir(out, "classify eval", overwrite=False) as tmp:
        _write(tmp, {"metrics.json": "{}", "plots/a.png": "png"})
    assert (out / "metrics.json").read_text() == "{}" and (out / "plots" / "a.png").is_file()
    marker = read_marker(out)
    assert marker["kind"] == "classify eval" and marker["entries"] == ["metrics.json", "plots"]
    assert [p.name for p in tmp_path.iterdir()] == ["report"]  # no temporary left beside it


def test_existing_output_needs_overwrite_and_keeps_the_users_files(tmp_path):
    out = tmp_path / "report"
    with output_dir(out, "classify eval", overwrite=False) as tmp:
        _write(tmp, {"metrics.json": "old", "old-only.png": "x"})
    (out / "my-notes.txt").write_text("mine")
    with pytest.raises(TextebmError, match="--overwrite"):
        check_output_dir(out, "classify eval", overwrite=False)
    with output_dir(out, "classify eval", overwrite=True) as tmp:
        _write(tmp, {"metrics.json": "new"})
    assert (out / "metrics.json").read_text() == "new"
    assert not (out / "old-only.png").exists()  # textebm's own earlier file, no longer written
    assert (out / "my-notes.txt").read_text() == "mine"  # never deleted: textebm did not write it
    assert read_marker(out)["entries"] == ["metrics.json"]


def test_foreign_and_other_kind_folders_are_never_touched(tmp_path):
    foreign = tmp_path / "mine"
    _write(foreign, {"thesis.tex": "years of work"})
    for overwrite in (False, True):
        with pytest.raises(TextebmError, match="not written by textebm"):
            with output_dir(foreign, "classify eval", overwrite=overwrite) as tmp:
                _write(tmp, {"metrics.json": "{}"})
    assert [p.name for p in foreign.iterdir()] == ["thesis.tex"]
    run = tmp_path / "run"
    _write(run, {"config.json": "{}", "model/model.safetensors": "w", MARKER: json.dumps(
        {"kind": "classify train", "entries": ["config.json", "model"]})})
    with pytest.raises(TextebmError, match="classify train"):
        check_output_dir(run, "classify eval", overwrite=True)
    assert (run / "model" / "model.safetensors").read_text() == "w"


def test_a_failure_leaves_the_earlier_output_as_it_was(tmp_path):
    out = tmp_path / "report"
    with output_dir(out, "x", overwrite=False) as tmp:
        _write(tmp, {"a.json": "1"})
    with pytest.raises(RuntimeError):
        with output_dir(out, "x", overwrite=True) as tmp:
            _write(tmp, {"a.json": "2"})
            raise RuntimeError("bad input found half-way")
    assert (out / "a.json").read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_files_need_overwrite_and_folders_are_refused(tmp_path):
    from textebm.outputs import output_file

    f = tmp_path / "scores.jsonl"
    check_output_file(f, overwrite=False, kind="x")  # new: fine
    with output_file(f, "x") as out:
        out.write("x")
    with pytest.raises(TextebmError, match="--overwrite"):
        check_output_file(f, overwrite=False, kind="x")
    check_output_file(f, overwrite=True, kind="x")
    with pytest.raises(TextebmError, match="is a folder"):
        check_output_file(tmp_path, overwrite=True, kind="x")
    with pytest.raises(TextebmError, match="is a file"):
        check_output_dir(f, "x", overwrite=True)


def test_a_users_file_with_the_name_of_a_new_entry_is_never_replaced(tmp_path):
    out = tmp_path / "report"
    with output_dir(out, "x", overwrite=False) as tmp:
        _write(tmp, {"a.json": "1"})
    (out / "predictions.jsonl").write_text("the user's own")  # a name textebm will write next time
    with pytest.raises(TextebmError, match="predictions.jsonl, which textebm did not write"):
        with output_dir(out, "x", overwrite=True) as tmp:
            _write(tmp, {"a.json": "2", "predictions.jsonl": "textebm's"})
    assert (out / "predictions.jsonl").read_text() == "the user's own" and (out / "a.json").read_text() == "1"


def test_a_damaged_marker_cannot_make_textebm_delete_outside_its_folder(tmp_path):
    out = tmp_path / "report"
    with output_dir(out, "x", overwrite=False) as tmp:
        _write(tmp, {"a.json": "1"})
    (tmp_path / "precious.txt").write_text("keep")
    (out / MARKER).write_text(json.dumps({"kind": "x", "entries": ["a.json", "../precious.txt", "/etc", ".."]}))
    with output_dir(out, "x", overwrite=True) as tmp:
        _write(tmp, {"b.json": "2"})
    assert (tmp_path / "precious.txt").read_text() == "keep"
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "b.json"]


def test_an_output_below_a_file_is_refused_before_any_work(tmp_path):
    f = tmp_path / "scores.jsonl"
    f.write_text("x")
    with pytest.raises(TextebmError, match="is a file, not a folder"):
        check_output_file(f / "deeper" / "out.jsonl", overwrite=False, kind="x")
    with pytest.raises(TextebmError, match="is a file, not a folder"):
        check_output_dir(f / "report", "x", overwrite=False)


def test_outputs_are_ordinary_files_and_folders_not_private_ones(tmp_path):
    """mkstemp / mkdtemp make private temporaries (0600 / 0700); what textebm leaves behind has the
    modes of any file the user makes (0666 / 0777 less the umask), so a colleague can read results."""
    import os

    from textebm.io import atomic_dir, atomic_write
    from textebm.outputs import output_dir

    old = os.umask(0o027)
    try:
        with atomic_write(tmp_path / "f.json") as f:
            f.write("{}")
        with atomic_dir(tmp_path / "d") as d:
            (d / "x").write_text("x")
        with output_dir(tmp_path / "o", "test-kind", False) as o:
            (o / "y").write_text("y")
    finally:
        os.umask(old)
    assert (tmp_path / "f.json").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "o").stat().st_mode & 0o777 == 0o750


def _killed(code: str) -> None:
    """Run `code` in a fresh Python that SIGKILLs itself at `KILL` (as `kill -9` mid-write)."""
    import os
    import subprocess
    import sys

    import textebm

    src = str(Path(textebm.__file__).parent.parent)
    code = code.replace("KILL", "os.kill(os.getpid(), signal.SIGKILL)")
    res = subprocess.run([sys.executable, "-c", "import os, signal\n" + code],
                         env={**os.environ, "PYTHONPATH": src})
    assert res.returncode == -9


def test_temporaries_left_by_a_killed_run_are_removed_by_the_next_write(tmp_path):
    """A kill in mid-write leaves `.metrics.json.textebm-XXXXXXXX.tmp` (and a `.report.textebm-XXXXXXXX.tmp` folder);
    the next write of the same target removes them, but never a live writer's temporary (it holds
    a lock) nor a file of another pattern."""
    import os
    import time

    from textebm.io import atomic_write, write_json

    target, report = tmp_path / "metrics.json", tmp_path / "report"
    _killed(f"from textebm.io import atomic_write\nwith atomic_write({str(target)!r}) as f:\n"
            "    f.write('{\"half\": ')\n    f.flush()\n    KILL")
    _killed(f"from textebm.outputs import output_dir\nwith output_dir({str(report)!r}, 'x', False) as d:\n"
            "    (d / 'a.json').write_text('1')\n    KILL")
    stale = sorted(p.name for p in tmp_path.iterdir())
    assert len(stale) == 2 and all(n.endswith(".tmp") for n in stale)
    ago = time.time() - 60
    for name in stale:
        os.utime(tmp_path / name, (ago, ago))
    (tmp_path / ".metrics.json.my-notes.tmp").write_text("mine")
    (tmp_path / ".metrics.json.backup01.tmp").write_text("mine too")  # 8 letters, as mkstemp's: still a user's
    os.utime(tmp_path / ".metrics.json.backup01.tmp", (ago, ago))
    with atomic_write(target) as live:
        live_tmp = next(p for p in tmp_path.iterdir() if p.name.startswith(".metrics.json.textebm-")
                        and p.name not in stale)
        os.utime(live_tmp, (ago, ago))
        write_json(target, {"other": 1})  # a second writer of the same target meanwhile
        assert live_tmp.exists() and not (tmp_path / stale[0]).exists()
        live.write("{}")
    with output_dir(report, "x", False) as d:
        (d / "a.json").write_text("2")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".metrics.json.backup01.tmp", ".metrics.json.my-notes.tmp",
                                                          "metrics.json", "report"]
    assert target.read_text() == "{}" and (report / "a.json").read_text() == "2"


def test_overwrite_replaces_only_a_file_the_same_command_wrote(tmp_path):
    from textebm.outputs import check_output_files, file_marker, output_file

    out = tmp_path / "scores.jsonl"
    with output_file(out, "score") as f:
        f.write("textebm's\n")
    assert file_marker(out).name == ".scores.jsonl.textebm.json"
    check_output_file(out, True, kind="score")  # its own output: may be replaced
    with pytest.raises(TextebmError, match="--overwrite"):
        check_output_file(out, False, kind="score")
    with pytest.raises(TextebmError, match="holds the output of `score`, not of `lm score`"):
        check_output_file(out, True, kind="lm score")
    with pytest.raises(TextebmError, match="is the input of --input"):
        check_output_file(out, True, kind="score", inputs=[("--input", str(out))])
    metrics = tmp_path / "metrics.json"  # a run's metrics: no marker beside it
    metrics.write_text("{}")
    with pytest.raises(TextebmError, match="not written by textebm"):
        check_output_file(metrics, True, kind="score")
    out.write_text("edited by the user\n")
    with pytest.raises(TextebmError, match="has changed since `score` wrote it"):
        check_output_file(out, True, kind="score")
    with pytest.raises(TextebmError, match="--html .*names the same file as --out"):
        check_output_files([("--out", tmp_path / "x"), ("--html", tmp_path / "." / "x")], False, kind="score")
    check_output_files([("--out", tmp_path / "x"), ("--html", "")], False, kind="score")


def test_a_model_folder_is_named_by_content_not_by_path(tmp_path):
    """folder_sha256: a copy elsewhere has the same hash; one changed byte of the weights (or a
    changed tokenizer file) another; textebm's hidden markers do not count."""
    import hashlib
    import os
    import shutil

    from textebm.fingerprint import file_sha256, folder_sha256

    model = tmp_path / "model"
    _write(model, {"config.json": '{"a": 1}', "tokenizer.json": "{}", "vocab/vocab.txt": "a\nb\n"})
    (model / "model.safetensors").write_bytes(bytes(range(256)) * 40)
    h = folder_sha256(model)
    assert file_sha256(model / "config.json") == hashlib.sha256(b'{"a": 1}').hexdigest()
    shutil.copytree(model, tmp_path / "copy")
    assert folder_sha256(tmp_path / "copy") == h
    (model / ".textebm-output.json").write_text("{}")
    assert folder_sha256(model) == h
    weights = bytearray((model / "model.safetensors").read_bytes())
    weights[100] ^= 1
    st = (model / "model.safetensors").stat()
    (model / "model.safetensors").write_bytes(bytes(weights))
    os.utime(model / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # a new version, whatever the clock
    assert folder_sha256(model) != h
    (tmp_path / "copy" / "vocab" / "vocab.txt").write_text("a\nc\n")
    assert folder_sha256(tmp_path / "copy") != h


def test_an_output_may_not_name_the_files_kept_beside_another(tmp_path):
    """`score --out t.jsonl --html t.jsonl.partial` would write the page where the rows of the
    unfinished run go (and then into t.jsonl): refused, as is another output's marker."""
    from textebm.outputs import check_output_files

    out = tmp_path / "t.jsonl"
    for other in (tmp_path / "t.jsonl.partial", tmp_path / ".t.jsonl.textebm.json"):
        with pytest.raises(TextebmError, match="names the same file as the (unfinished rows|marker) of --out"):
            check_output_files([("--out", out), ("--html", other)], False, kind="score")
    check_output_files([("--out", out), ("--html", tmp_path / "t.html")], False, kind="score")


def test_a_users_file_named_like_a_partial_is_never_cut(tmp_path):
    """A file at OUT.partial that textebm did not write (no header) is refused as it is: not even a
    torn last line is dropped."""
    from textebm.resumable import PartialFile

    out = tmp_path / "s.jsonl"
    mine = tmp_path / "s.jsonl.partial"
    mine.write_bytes(b'{"my": "notes 1"}\n{"my": "notes 2"}')  # no final newline
    with pytest.raises(TextebmError, match="no textebm header"):
        PartialFile(out, "score").start({"model": "x"})
    assert mine.read_bytes() == b'{"my": "notes 1"}\n{"my": "notes 2"}'


def test_a_replacement_that_fails_midway_leaves_the_earlier_output_whole(tmp_path, monkeypatch):
    """Earlier output holds a file `a` and a folder `b`; the new run has a folder `a` and a file `b`
    (entries that change kind). A move failing in the middle brings every earlier entry back:
    never a mix of two runs. Then a clean run replaces it all."""
    import os

    out = tmp_path / "report"
    with output_dir(out, "residual ppl", overwrite=False) as tmp:
        _write(tmp, {"a": "old a", "b/x.txt": "old b", "c.json": "old c"})
    (out / "notes.txt").write_text("mine")
    real = os.replace
    calls = {"n": 0}

    def flaky(src, dst):
        if Path(src).parent.name.startswith(".textebm-tmp") or "report." in str(Path(src).parent.name):
            calls["n"] += 1
            if calls["n"] == 2:
                raise OSError("disk full")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(OSError, match="disk full"):
        with output_dir(out, "residual ppl", overwrite=True) as tmp:
            _write(tmp, {"a/y.txt": "new a", "b": "new b", "d.json": "new d"})
    monkeypatch.setattr(os, "replace", real)
    assert calls["n"] == 2  # the failure came after a new entry had moved in
    assert (out / "a").read_text() == "old a" and (out / "b" / "x.txt").read_text() == "old b"
    assert (out / "c.json").read_text() == "old c" and not (out / "d.json").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == sorted(["a", "b", "c.json", "notes.txt", MARKER])
    assert read_marker(out)["entries"] == ["a", "b", "c.json"]
    with output_dir(out, "residual ppl", overwrite=True) as tmp:
        _write(tmp, {"a/y.txt": "new a", "b": "new b", "d.json": "new d"})
    assert (out / "a" / "y.txt").read_text() == "new a" and (out / "b").read_text() == "new b"
    assert not (out / "c.json").exists() and (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == sorted(["a", "b", "d.json", "notes.txt", MARKER])


def test_private_files_a_library_writes_come_out_ordinary(tmp_path):
    """transformers' save_pretrained wrote safetensors shards 0600 beside 0644 JSON: atomic_dir and
    output_dir give every file 0666 and every folder 0777, less the umask."""
    import os

    from textebm.io import atomic_dir

    old = os.umask(0o022)
    try:
        with atomic_dir(tmp_path / "model") as d:
            (d / "model.safetensors").write_bytes(b"w")
            os.chmod(d / "model.safetensors", 0o600)
            (d / "sub").mkdir(mode=0o700)
            (d / "sub" / "x.json").write_text("{}")
            os.chmod(d / "sub" / "x.json", 0o600)
        with output_dir(tmp_path / "o", "test-kind", False) as o:
            (o / "z.bin").write_bytes(b"z")
            os.chmod(o / "z.bin", 0o600)
    finally:
        os.umask(old)
    assert (tmp_path / "model" / "model.safetensors").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "model" / "sub").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "model" / "sub" / "x.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "o" / "z.bin").stat().st_mode & 0o777 == 0o644


def test_an_entry_the_user_changed_is_never_replaced(tmp_path):
    """The marker records each entry's content hash: --overwrite refuses an edited entry (named),
    replaces an untouched output, and a textebm command's own later edit is sealed again."""
    from textebm.outputs import seal_marker

    out = tmp_path / "report"
    with output_dir(out, "residual ppl", overwrite=False) as tmp:
        _write(tmp, {"metrics.json": "{}", "cells/a.json": "1"})
    assert set(read_marker(out)["sha256"]) == {"metrics.json", "cells"}
    assert check_output_dir(out, "residual ppl", overwrite=True) is True
    (out / "cells" / "a.json").write_text("2")  # an edit inside a folder entry counts too
    with pytest.raises(TextebmError, match="cells changed since `residual ppl` wrote it"):
        check_output_dir(out, "residual ppl", overwrite=True)
    seal_marker(out, ["cells"])  # what a textebm command that updates an entry does
    assert check_output_dir(out, "residual ppl", overwrite=True) is True
    (out / "metrics.json").write_text('{"mine": 1}')
    with pytest.raises(TextebmError, match="metrics.json changed"):
        with output_dir(out, "residual ppl", overwrite=True) as tmp:
            _write(tmp, {"metrics.json": "{}"})
    assert (out / "metrics.json").read_text() == '{"mine": 1}'
    (out / "metrics.json").unlink()  # a removed entry is no change to protect
    assert check_output_dir(out, "residual ppl", overwrite=True) is True


def test_an_output_folder_may_not_be_or_hold_an_input(tmp_path):
    from textebm.outputs import check_not_input

    run, data = tmp_path / "run", tmp_path / "run" / "data"
    data.mkdir(parents=True)
    with pytest.raises(TextebmError, match="--out .*: is the input of --init"):
        check_not_input(run, [("--init", run)])
    with pytest.raises(TextebmError, match="holds the input of --data"):
        check_not_input(run, [("--data", data)])
    with pytest.raises(TextebmError, match="holds the input of --train"):
        check_not_input(run, [("--train", [str(tmp_path / "x"), str(data)])])
    check_not_input(data / "new-run", [("--data", data), ("--init", ""), ("--init", tmp_path / "missing")])
