"""Issue 17: ``--fix`` a careful engineer trusts. Every write is atomic (temporary file in
the same directory, fsync, rename) and keeps mode and owner; symlinks are written through;
hard links, read-only files and files changed since they were read are refused with a
message; line endings, BOM and comments stay; a write failure is an error in the report
and exit code 2; ``--diff`` shows exactly the bytes that would be written; a run that
cannot finish writes nothing; and a run killed at any point leaves every file old or new.

Runs as root: "read-only" is the mode bits (gpugate refuses a file without write bits even
when root could write it), and owner changes are tested with an unused uid."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import lint.cli as cli
from lint import fix
from lint.cli import lint_main
from lint.fix import fix_text
from policies.config import Policy

ROOT = Path(__file__).resolve().parent.parent
POLICY = Policy()

JOB = """\
# training job (comment kept)
apiVersion: batch/v1
kind: Job
metadata:
  name: train   # inline comment
  labels: {zeta: "1", alpha: "2"}
spec:
  template:
    spec:
      restartPolicy: Never
      nodeSelector:
        nvidia.com/gpu.product: NVIDIA-H20
      containers:
      - name: main
        image: trainer
        resources:
          limits:
            nvidia.com/gpu: 1
"""
FIXED = fix_text(JOB, POLICY)


def test_the_sample_needs_a_fix() -> None:
    assert FIXED != JOB and "# inline comment" in FIXED and FIXED.index("zeta") < FIXED.index("alpha")


def run_fix(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    code = lint_main(["--fix", "--format", "json", "--no-progress", "--fail-on", "never", *args])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def messages(data: dict[str, Any]) -> list[str]:
    return [f["message"] for f in data["findings"] if f["rule"] == "GG001"]


def test_atomic_write_keeps_mode_and_owner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    path.chmod(0o640)
    if os.geteuid() == 0:
        os.chown(path, 4242, 4343)
    before = path.stat()
    code, data, err = run_fix([str(path)], capsys)
    after = path.stat()
    assert code == 0 and path.read_text() == FIXED, err
    assert stat.S_IMODE(after.st_mode) == 0o640
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert after.st_ino != before.st_ino  # a new file renamed over the old one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]  # no temporary file left


def test_symlink_is_written_through_to_its_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "real" / "job.yaml"
    target.parent.mkdir()
    target.write_text(JOB)
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    code, _, err = run_fix([str(link)], capsys)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == FIXED


def test_hard_link_is_refused_not_broken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    os.link(path, tmp_path / "other.yml")
    code, data, err = run_fix([str(path)], capsys)
    assert code == 2 and "hard links" in err
    assert any("hard links" in m for m in messages(data))
    assert path.read_text() == JOB and path.stat().st_nlink == 2
    # The report is the file's as it stays: the usage findings are back.
    assert any(f["rule"] == "GG101" for f in data["findings"])


def test_read_only_file_is_never_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    path.chmod(0o444)
    code, data, err = run_fix([str(path)], capsys)
    assert code == 2 and "read-only" in err and path.read_text() == JOB
    assert stat.S_IMODE(path.stat().st_mode) == 0o444


def test_a_file_changed_since_it_was_read_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    real = cli.lint_text

    def edit_meanwhile(text: Any, name: str, *args: Any) -> None:
        real(text, name, *args)
        Path(name).write_text(JOB + "# edited by someone else\n")

    monkeypatch.setattr(cli, "lint_text", edit_meanwhile)
    code, data, err = run_fix([str(path)], capsys)
    assert code == 2 and "changed since it was read" in err
    assert path.read_text().endswith("# edited by someone else\n")


def test_a_write_failure_is_an_error_in_the_report_and_the_exit_code(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB)

    def no_space(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)
    code, data, err = run_fix([str(path)], capsys)
    assert code == 2 and "No space left" in err and "wrote" not in err
    assert any("No space left" in m for m in messages(data))
    assert path.read_text() == JOB
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


def test_nothing_is_written_when_the_run_cannot_finish(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("a.yaml", "b.yaml", "c.yaml"):
        (tmp_path / name).write_text(JOB)
    real = cli.lint_text
    seen = []

    def interrupted(text: Any, name: str, *args: Any) -> None:
        seen.append(name)
        if len(seen) == 3:
            raise KeyboardInterrupt
        real(text, name, *args)

    monkeypatch.setattr(cli, "lint_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        lint_main(["--fix", "--no-progress", str(tmp_path)])
    capsys.readouterr()
    assert all((tmp_path / n).read_text() == JOB for n in ("a.yaml", "b.yaml", "c.yaml"))


def test_crlf_and_bom_are_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + JOB.replace("\n", "\r\n").encode())
    code, _, err = run_fix([str(path)], capsys)
    data = path.read_bytes()
    assert code == 0, err
    assert data.startswith(b"\xef\xbb\xbf") and data.count(b"\n") == data.count(b"\r\n")
    assert data == b"\xef\xbb\xbf" + FIXED.replace("\n", "\r\n").encode()


def test_diff_shows_exactly_what_would_be_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.yaml"
    original = JOB.replace("\n", "\r\n").rstrip("\r\n")  # CRLF, no newline at the end
    path.write_bytes(original.encode())
    lint_main(["--fix", "--diff", "--no-progress", "--fail-on", "never", str(path)])
    diff = capsys.readouterr().out
    assert path.read_bytes() == original.encode()  # --diff writes nothing
    patched = subprocess.run(["patch", "-o", "-", str(path)], input=diff.encode(), capture_output=True)
    if patched.returncode == 127 or b"not found" in patched.stderr:
        pytest.skip("no patch(1)")
    assert patched.returncode == 0, patched.stderr
    expected = fix.fix_text_result(original, POLICY).text.encode()
    assert patched.stdout == expected


def test_diff_says_when_a_file_would_be_left_alone(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    path.chmod(0o444)
    lint_main(["--fix", "--diff", "--no-progress", str(path)])
    captured = capsys.readouterr()
    assert "would not be written" in captured.err and "read-only" in captured.err


def test_fix_input_keeps_the_old_api(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    err = io.StringIO()
    assert fix.fix_input(JOB.encode(), str(path), POLICY, diff=False, stderr=err) == FIXED.encode()
    assert path.read_text() == FIXED and "wrote" in err.getvalue()


# -- killed at a random point: every file old or new -----------------------------------------

KILL_FILES = 40


def test_fix_killed_at_a_random_point_leaves_every_file_old_or_new(tmp_path: Path) -> None:
    rng = random.Random(17)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for attempt in range(4):
        work = tmp_path / f"run{attempt}"
        work.mkdir()
        variants = {}
        for i in range(KILL_FILES):
            text = JOB.replace("name: train", f"name: train-{i}")
            (work / f"job{i:02}.yaml").write_text(text)
            variants[f"job{i:02}.yaml"] = (text, fix_text(text, POLICY))
        proc = subprocess.Popen([sys.executable, "-m", "gpugate", "lint", "--fix", "--no-progress",
                                 "--fail-on", "never", str(work)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.05, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for name, (old, new) in variants.items():
            content = (work / name).read_text()
            assert content in (old, new), (attempt, name)
        leftovers = [p.name for p in work.iterdir() if p.name not in variants]
        assert all(n.endswith(".gpugate-tmp") for n in leftovers), leftovers
