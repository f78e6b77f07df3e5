"""Run-folder files: atomic writes, race-free folders and probes, one-line errors for bad state-dict files."""

from __future__ import annotations

import errno
import os
import threading

import pytest
import torch

import parity.files
from parity.files import atomic_write, check_writable, make_run_folder, no_space_message


def _hammer(function, threads: int = 8, calls: int = 50) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def work():
        start.wait()
        for _ in range(calls):
            try:
                function()
            except BaseException as error:  # noqa: BLE001 - collected and asserted
                errors.append(error)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return errors


def test_run_folders_started_together_are_distinct(tmp_path):
    made: list = []
    assert _hammer(lambda: made.append(make_run_folder(tmp_path, "run"))) == []
    assert len(made) == len(set(made)) == 400 and all(p.is_dir() for p in made)


def test_writability_probes_do_not_collide(tmp_path):
    assert _hammer(lambda: check_writable(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_failure_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    atomic_write(target, "old")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(parity.files.os, "fsync", full)
    with pytest.raises(OSError) as caught:
        atomic_write(target, "new")
    assert no_space_message(caught.value) == f"no space left on device: {target}"
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_unwritable_runs_folder_exits_2(tmp_path, capsys):
    from parity.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["run", "--steps", "5", "--no-progress", "--runs-dir", str(blocker / "sub")]) == 2
    assert "not writable" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["empty", "garbage", "truncated", "list", "missing", "pickle"])
def test_bad_state_dict_files_raise_value_error_naming_them(tmp_path, content):
    from parity.convert import load_torch_state_dict
    from jax_impl.models import LeNet

    path = tmp_path / "weights.pt"
    good = torch.nn.Linear(3, 2).state_dict()
    if content == "empty":
        path.write_bytes(b"")
    elif content == "garbage":
        path.write_bytes(os.urandom(300))
    elif content == "truncated":
        torch.save(good, path)
        path.write_bytes(path.read_bytes()[:200])
    elif content == "list":
        torch.save([1, 2], path)
    elif content == "pickle":
        torch.save({"w": threading.Lock}, path)
    with pytest.raises(ValueError, match="weights.pt"):
        load_torch_state_dict(LeNet(), path)
