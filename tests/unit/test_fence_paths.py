"""`fence.path_refusal`, the check of an editor's tool's path: a lone
surrogate is refused outright, and a path is judged as the editor may read
it (`..` before symlinks) as well as by its real path."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.agent.tools.fence import path_refusal


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A root holding agentd's data folder, a transcript in it, and a link
    to a folder deeper elsewhere in the root."""
    data = tmp_path / "agentd-home"
    (data / "projects" / "p" / "sessions").mkdir(parents=True)
    (data / "projects" / "p" / "sessions" / "s.jsonl").write_text("{}\n")
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "lnk").symlink_to(tmp_path / "deep" / "er")
    monkeypatch.setenv("AGENTD_HOME", str(data))
    monkeypatch.setenv("AGENTD_CONFIG_DIR", str(tmp_path / "agentd-config"))
    return tmp_path


@pytest.mark.parametrize("half", ["\ud83d", "\udc80"])
@pytest.mark.parametrize("write", [False, True])
def test_a_lone_surrogate_is_refused(home: Path, half: str, write: bool) -> None:
    for path in (
        f"agentd-home/{half}/../projects/p/sessions/s.jsonl",
        f"{home}/agentd-home/{half}/../projects/p/sessions",
        f"plain-{half}.txt",
    ):
        why = path_refusal(path, home, write=write)
        assert why is not None and "lone surrogate" in why, path


@pytest.mark.parametrize("write", [False, True])
def test_dot_dot_after_a_link_is_judged_as_the_editor_reads_it(home: Path, write: bool) -> None:
    # Lexically the transcript; really `deep/agentd-home/...`, which is nothing.
    why = path_refusal("lnk/../agentd-home/projects/p/sessions/s.jsonl", home, write=write)
    assert why is not None and "agentd's own data folder" in why, why
    # Really the transcript; lexically beside the root: still refused.
    why = path_refusal("lnk/../../agentd-home/projects/p/sessions/s.jsonl", home, write=write)
    assert why is not None and "agentd's own data folder" in why, why
    # Both readings elsewhere: the editor may be asked.
    assert path_refusal("lnk/../deep/x.txt", home, write=write) is None
    assert path_refusal("plain.txt", home, write=write) is None
