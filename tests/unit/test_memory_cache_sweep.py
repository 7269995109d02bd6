"""The memory index cache folder's sweep (`agentd.memory.cache_sweep`): by
age and by count, never a held stem, never a name it did not write."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agentd.memory import cache_sweep


def _stem(folder: Path, digit: str, age_days: float, now: float) -> list[Path]:
    paths = [folder / f"{digit * 32}.{suffix}" for suffix in ("jsonl", "index", "delta")]
    for path in paths:
        path.write_bytes(b"x")
        when = now - age_days * 24 * 3600
        os.utime(path, (when, when))
    return paths


def test_the_least_recently_used_stems_past_the_count_go_unless_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_sweep, "MAX_STEMS", 2)
    folder = tmp_path / "home" / "cache" / "memory-index"
    folder.mkdir(parents=True)
    now = time.time()
    newest = _stem(folder, "a", 1, now)
    second = _stem(folder, "b", 2, now)
    held_old = _stem(folder, "c", 3, now)
    oldest = _stem(folder, "d", 4, now)
    fd = cache_sweep.hold(held_old[0])
    assert fd is not None
    try:
        # Holding touches the stem: now its most recently used.
        removed = cache_sweep.sweep(newest[0], now=now + 1)
    finally:
        os.close(fd)
    # Each with its lock file (made to be taken, then removed last).
    locks = [f"{'b' * 32}.lock", f"{'d' * 32}.lock"]
    assert sorted(removed) == sorted([*(p.name for p in second + oldest), *locks])
    assert all(p.exists() for p in newest + held_old)
    # Let go, and old: the next sweep removes it too (its lock file with it).
    for path in held_old:
        os.utime(path, (now - 90 * 24 * 3600,) * 2)
    os.utime(folder / f"{'c' * 32}.lock", (now - 90 * 24 * 3600,) * 2)
    removed = cache_sweep.sweep(newest[0], now=now)
    assert sorted(removed) == sorted([*(p.name for p in held_old), f"{'c' * 32}.lock"])


def test_a_held_stem_is_held_again_after_a_sweep_removed_its_lock(tmp_path: Path) -> None:
    """The lock-file protocol: a holder never keeps a lock on an unlinked file."""
    folder = tmp_path / "home" / "cache" / "memory-index"
    folder.mkdir(parents=True)
    target = folder / f"{'e' * 32}.index"
    fd = cache_sweep.hold(target)
    assert fd is not None
    os.close(fd)
    (folder / f"{'e' * 32}.lock").unlink()  # as a sweep leaves it
    fd = cache_sweep.hold(target)
    assert fd is not None
    try:
        held = os.fstat(fd)
        named = os.stat(folder / f"{'e' * 32}.lock")
        assert (held.st_ino, held.st_dev) == (named.st_ino, named.st_dev)
    finally:
        os.close(fd)
