"""Issue 17: inputs of every shape a file system holds. Only regular files are read (a
FIFO or a device is an error, never a hang), the size limit holds before reading, nothing
is skipped silently while walking, and one file's failure never loses the report.

Tests run as root here, so unreadable paths are simulated by monkeypatching ``os.open``
and ``os.scandir`` to raise PermissionError (root reads mode 000 files); the real-mode
variant runs only when not root."""

from __future__ import annotations

import io
import json
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from test_lint_cli import GOOD_POD as POD

import lint.cli as cli
from lint.cli import HELM_HINT, lint_main
from lint.documents import MAX_FILE_BYTES


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    code = lint_main([*args, "--format", "json", "--no-progress"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def by_file(data: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in data["findings"]:
        out.setdefault(Path(f["file"]).name, []).append(f["message"])
    return out


def in_thread(fn: Any, timeout: float = 20) -> Any:
    """Run ``fn`` with a timeout: a hang is a failure, not a stuck suite."""
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", fn()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the linter hung"
    return result["value"]


def test_fifo_is_an_error_not_a_hang(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ok.yaml").write_text(POD)
    os.mkfifo(tmp_path / "pipe.yaml")
    code = in_thread(lambda: lint_main([str(tmp_path), "--format", "json", "--no-progress"]))
    data = json.loads(capsys.readouterr().out)
    assert code == 2
    assert data["summary"]["files"] == 2
    assert any("FIFO" in m for m in by_file(data)["pipe.yaml"])


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_device_is_an_error_not_a_hang(capsys: pytest.CaptureFixture[str]) -> None:
    code = in_thread(lambda: lint_main(["/dev/zero", "--format", "json", "--no-progress"]))
    data = json.loads(capsys.readouterr().out)
    assert code == 2 and "character device" in data["findings"][0]["message"]


def test_socket_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
        code, data, err = run([str(path)], capsys)
    finally:
        sock.close()
    assert code == 2 and data["summary"]["files"] == 1 and "s.yaml" in err


def test_size_limit_is_checked_before_reading(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:  # sparse: no disk, and no byte of it may be read
        fh.truncate(MAX_FILE_BYTES + 1)
    read = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: read.append(n) or real_read(fd, n))
    code, data, _ = run([str(big)], capsys)
    assert read == []
    assert code == 1 and "over the 32 MiB limit" in data["findings"][0]["message"]


def test_stdin_has_a_limit(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "MAX_FILE_BYTES", 1024)
    monkeypatch.setattr(cli.read_stdin, "__defaults__", (1024,))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"# x\n" * 1000)))
    code, data, _ = run(["-"], capsys)
    assert code == 1 and "standard input is over" in data["findings"][0]["message"]


def test_broken_symlink_and_loops_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "ok.yaml").write_text(POD)
    (d / "broken.yaml").symlink_to(tmp_path / "gone.yaml")
    (d / "a.yaml").symlink_to(d / "b.yaml")
    (d / "b.yaml").symlink_to(d / "a.yaml")
    (d / "sub").mkdir()
    (d / "sub" / "up").symlink_to(d)  # a directory loop
    code, data, err = run([str(d)], capsys)
    files = by_file(data)
    assert code == 2
    assert "broken symbolic link" in files["broken.yaml"][0]
    assert "symbolic link loop" in files["a.yaml"][0] and "symbolic link loop" in files["b.yaml"][0]
    assert any("symbolic link loop" in m for m in files["up"])
    assert data["summary"]["files"] == 5  # ok, broken, a, b, the looping directory


def test_symlinked_file_and_directory_are_followed(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "pod.yaml").write_text(POD)
    top = tmp_path / "top"
    top.mkdir()
    (top / "linked").symlink_to(real)
    (top / "file.yaml").symlink_to(real / "pod.yaml")
    code, data, _ = run([str(top)], capsys)
    assert code == 0 and data["summary"]["files"] == 2 and data["summary"]["documents"] == 2


def test_unreadable_subdirectory_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ok.yaml").write_text(POD)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "hidden.yaml").write_text(POD)
    real_scandir = os.scandir

    def scandir(path: Any) -> Any:  # simulated: root reads mode 000 directories
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    code, data, err = run([str(tmp_path)], capsys)
    assert code == 2 and "locked" in err
    assert by_file(data)["locked"] == ["cannot read directory: permission denied"]
    assert data["summary"]["files"] == 2


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode 000 files")
def test_unreadable_file_with_real_modes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text(POD)
    path.chmod(0)
    code, data, _ = run([str(path)], capsys)
    assert code == 2 and "permission denied" in data["findings"][0]["message"]


def test_unreadable_file_simulated(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ok.yaml").write_text(POD)
    (tmp_path / "secret.yaml").write_text(POD)
    real_open = os.open

    def fake_open(path: Any, flags: int, *args: Any) -> int:
        if os.fspath(path).endswith("secret.yaml"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", fake_open)
    code, data, _ = run([str(tmp_path)], capsys)
    assert code == 2 and data["summary"]["files"] == 2 and data["summary"]["documents"] == 1
    assert by_file(data)["secret.yaml"] == ["cannot read: permission denied"]


HELM = """\
{{- if .Values.enabled }}
apiVersion: v1
kind: Pod
metadata:
  name: {{ .Release.Name }}
{{ $x := 1 }}
spec: {}
{{- end }}
"""


@pytest.mark.parametrize("text", [HELM, "apiVersion: v1\nkind: Pod\n{{ .Values.x }}: y\n",
                                  "apiVersion: v1\nkind: Pod\nmetadata:\n  labels:\n"
                                  "  {{- include \"x\" . | nindent 4 }}\nspec: {}\n",
                                  "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n"
                                  "spec: {{ .Values.spec }}\n"])
def test_helm_template_is_one_clear_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            text: str) -> None:
    (tmp_path / "a.yaml").write_text(text)
    (tmp_path / "b.yaml").write_text(POD)
    code, data, _ = run([str(tmp_path)], capsys)
    assert code == 1, data  # a finding, not an internal error
    assert data["summary"]["files"] == 2
    messages = by_file(data)["a.yaml"]
    assert messages and all(HELM_HINT in m for m in messages), messages


def test_an_internal_error_is_a_finding_exit_2_and_the_run_goes_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.yaml").write_text(POD.replace("name: ok", "name: boom"))
    (tmp_path / "b.yaml").write_text(POD)
    real = cli.evaluate

    def evaluate(doc: Any, *args: Any, **kwargs: Any) -> Any:
        if doc["metadata"]["name"] == "boom":
            raise TypeError("simulated bug")
        return real(doc, *args, **kwargs)

    monkeypatch.setattr(cli, "evaluate", evaluate)
    for fmt in ("json", "sarif", "junit", "text", "github"):
        code = lint_main([str(tmp_path), "--format", fmt, "--no-progress"])
        out = capsys.readouterr().out
        assert code == 2 and "simulated bug" in out, fmt
    code, data, _ = run([str(tmp_path)], capsys)
    assert data["summary"]["files"] == 2 and data["summary"]["documents"] == 1
    assert by_file(data)["a.yaml"][0].startswith("internal error while checking this document")


def test_a_crash_outside_any_file_still_writes_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.yaml").write_text(POD)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("walk bug")

    monkeypatch.setattr(cli, "iter_inputs", broken)
    code = lint_main([str(tmp_path), "--format", "json", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 2 and "walk bug" in captured.err
    assert json.loads(captured.out)["summary"]["files"] == 0
