"""The memory index kept across starts (`agentd.memory.index_cache`, and the
whole index beside it, `agentd.memory.index_snapshot`): a start with them
gives exactly the index a fresh build gives, reads only the notes whose
identity changed, and survives any cache or snapshot file."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import zlib
from array import array
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.layout import memory_index_cache_file
from agentd.memory import index_cache, index_delta, index_snapshot, project, store
from agentd.memory.project import ProjectMemory
from agentd.memory.tokenize import TOKENIZER_VERSION, terms

# Old enough to be trusted (`index_cache.RACY_NS`): a folder left as it was.
AN_HOUR_AGO_NS = time.time_ns() - 3600 * 10**9

NOTES = {
    "deploy.md": (
        "Deploy checklist",
        "How we ship releases",
        "Run make ship after the smoke tests.",
    ),
    "db.md": (
        "Database notes",
        "Postgres pooling",
        "Pool size is 20; pgbouncer in transaction mode.",
    ),
    "zh.md": ("部署流程", "发布检查清单", "上线前确认监控和回滚开关。灰度发布后观察错误率。"),
    "ja.md": (
        "レビュー方針",
        "コードレビューの基準",
        "小さな変更に分割する。テストを必ず追加する。",
    ),
    "ko.md": ("배포 절차", "릴리스 체크리스트", "운영 반영 전에 모니터링을 확인한다."),
    "camel.md": (
        "parseHTTPHeaders",
        "getUserID and XMLParser",
        "\uff26\uff55\uff4c\uff4c width text, \uff8a\uff9d\uff76\uff78.",
    ),
}


def _write(folder: Path, name: str, title: str, description: str, body: str) -> Path:
    path = folder / name
    path.write_text(
        f"---\nname: {title}\ndescription: {description}\ntype: project\n---\n{body}\n",
        encoding="utf-8",
    )
    os.utime(path, ns=(AN_HOUR_AGO_NS, AN_HOUR_AGO_NS))
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    folder = tmp_path / "memory"
    folder.mkdir()
    for name, note in NOTES.items():
        _write(folder, name, *note)
    # Indexed with problems, and skipped: both as a fresh build has them.
    _write(folder, "plain.md", "x", "y", "z").write_text("no front matter at all\n")
    os.utime(folder / "plain.md", ns=(AN_HOUR_AGO_NS, AN_HOUR_AGO_NS))
    (folder / "binary.md").write_bytes(b"\0\1\2")
    (folder / "inside.md").symlink_to(folder / "db.md")
    return folder


def _memory(tmp_path: Path, folder: Path, *, cache: bool = True) -> ProjectMemory:
    home = tmp_path / "home" if cache else None
    return ProjectMemory(tmp_path / "ws", directory=folder, watch=False, index_cache_home=home)


async def _started(tmp_path: Path, folder: Path, *, cache: bool = True) -> ProjectMemory:
    memory = _memory(tmp_path, folder, cache=cache)
    await memory.start()
    await memory.aclose()  # writes the cache when it changed
    return memory


def _cache_file(tmp_path: Path, folder: Path) -> Path:
    return memory_index_cache_file(Path(os.path.realpath(folder)), tmp_path / "home")


def _snapshot_file(tmp_path: Path) -> Path:
    """The saved index (one project per test: one file)."""
    (found,) = (tmp_path / "home" / "cache" / "memory-index").glob("*.index")
    return found


def _shape(memory: ProjectMemory) -> dict[str, Any]:
    """Everything a fresh build decides: postings (exact floats, in their
    order), the docs as indexed, the vocabulary, the averages, and what was
    skipped."""
    index = memory._index
    return {
        "avg": index._avg,
        "postings": [(term, list(found.items())) for term, found in index._postings.items()],
        "next id": index._next_id,
        "vocab": index._vocab,
        "docs": [
            (d.id, d.info, d.head, d.content_hash, d.lengths, d.terms, d.about_count)
            for d in index.docs()
        ],
        "skipped": memory._skipped,
    }


class _Loads:
    """Counts the reads of index cache files (`index_cache.load`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = index_cache.load

        def counted(cache_file: Path) -> Any:
            self.count += 1
            return real(cache_file)

        monkeypatch.setattr(index_cache, "load", counted)


class _Reads:
    """Counts the notes read from their files (`read_topic_stat`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        real = store.read_topic_stat

        def counted(path: Path, *args: Any, **kwargs: Any) -> Any:
            self.names.append(path.name)
            return real(path, *args, **kwargs)

        monkeypatch.setattr(project, "read_topic_stat", counted)


async def test_a_warm_start_is_the_index_a_fresh_build_gives(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _started(tmp_path, folder)
    cached = index_cache.load(_cache_file(tmp_path, folder))
    # Regular notes only: a symlink is read each time, a skipped file has no entry.
    assert sorted(cached) == sorted([*NOTES, "plain.md"])
    written = os.stat(_cache_file(tmp_path, folder))
    saved = os.stat(_snapshot_file(tmp_path))
    reads = _Reads(monkeypatch)
    loads = _Loads(monkeypatch)
    warm = await _started(tmp_path, folder)
    assert sorted(reads.names) == ["binary.md", "inside.md"]
    # Every regular note is the saved index's, as it was: taken from there,
    # the index cache's entries not even parsed.
    assert loads.count == 0
    # Nothing changed: not written again.
    assert index_cache.identity_of(os.stat(_cache_file(tmp_path, folder))) == (
        index_cache.identity_of(written)
    )
    assert index_cache.identity_of(os.stat(_snapshot_file(tmp_path))) == (
        index_cache.identity_of(saved)
    )
    assert oct(saved.st_mode & 0o777) == "0o600"
    fresh = await _started(tmp_path, folder, cache=False)
    assert _shape(warm) == _shape(fresh)
    for query in ("how do we ship", "部署 回滚", "コードレビュー", "배포 절차", "http headers"):
        assert warm.recall(query) == fresh.recall(query), query
        assert warm.recall(query).docs, query


async def test_changed_added_and_removed_notes_are_read_and_dropped(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _started(tmp_path, folder)
    # Same size, same (old) mtime a second later: only the identity tells.
    same_size = folder / "deploy.md"
    same_size.write_text(same_size.read_text().replace("make ship", "make sail"))
    os.utime(same_size, ns=(AN_HOUR_AGO_NS + 10**9, AN_HOUR_AGO_NS + 10**9))
    _write(folder, "added.md", "Release freeze", "When not to deploy", "No deploys on Fridays.")
    (folder / "db.md").unlink()
    (folder / "inside.md").unlink()
    # A cached note that is now a symlink (read each time, no entry).
    (folder / "ko.md").rename(folder / ".ko-target")
    (folder / "ko.md").symlink_to(folder / ".ko-target")
    # A new inode under the same name, size and mtime (a rename over it).
    (folder / "zh.new").write_bytes((folder / "zh.md").read_bytes())
    os.replace(folder / "zh.new", folder / "zh.md")
    os.utime(folder / "zh.md", ns=(AN_HOUR_AGO_NS, AN_HOUR_AGO_NS))
    reads = _Reads(monkeypatch)
    warm = await _started(tmp_path, folder)
    assert sorted(reads.names) == ["added.md", "binary.md", "deploy.md", "ko.md", "zh.md"]
    fresh = await _started(tmp_path, folder, cache=False)
    assert _shape(warm) == _shape(fresh)
    assert [d.name for d in warm.recall("make sail").docs] == ["Deploy checklist"]
    cached = index_cache.load(_cache_file(tmp_path, folder))
    assert "db.md" not in cached and "ko.md" not in cached and "added.md" in cached
    assert "sail" in cached["deploy.md"].terms[2] and "camel.md" in cached


async def test_a_note_changed_too_recently_is_not_kept(tmp_path: Path, folder: Path) -> None:
    """Modified within `RACY_NS` of its read: the same size could be written
    again within the same timestamp tick, so the entry is left out."""
    (folder / "fresh.md").write_text("---\nname: Fresh\n---\njust written\n")
    await _started(tmp_path, folder)
    cached = index_cache.load(_cache_file(tmp_path, folder))
    assert "fresh.md" not in cached and "deploy.md" in cached


def _hostile(kind: str, cache_file: Path, tmp_path: Path) -> None:
    good = cache_file.read_bytes()
    lines = good.split(b"\n")
    if kind == "corrupt":
        cache_file.write_bytes(b"\x80\x81not json at all\n" * 100)
    elif kind == "truncated":
        cache_file.write_bytes(good[: len(good) // 2])
    elif kind == "truncated-at-a-line":
        cache_file.write_bytes(b"\n".join(lines[:3]) + b"\n")
    elif kind == "other-version":
        header = json.loads(lines[0])
        header["tokenizer"] += 1
        cache_file.write_bytes(b"\n".join([json.dumps(header).encode(), *lines[1:]]))
    elif kind == "wrong-types":
        row = json.loads(lines[1])
        row[1] = "12"  # the size as a string
        cache_file.write_bytes(b"\n".join([lines[0], json.dumps(row).encode(), *lines[2:]]))
    elif kind == "deep-nesting":
        cache_file.write_bytes(lines[0] + b"\n" + b"[" * 100_000 + b"\n")
    elif kind == "fifo":
        cache_file.unlink()
        os.mkfifo(cache_file)
    elif kind == "symlink":
        elsewhere = tmp_path / "elsewhere.jsonl"
        elsewhere.write_bytes(good)
        cache_file.unlink()
        cache_file.symlink_to(elsewhere)
    elif kind == "device":
        cache_file.unlink()
        cache_file.symlink_to("/dev/zero")
    elif kind == "huge":
        with cache_file.open("r+b") as f:
            f.truncate(index_cache.MAX_CACHE_BYTES + 1)  # sparse: no disk used
    elif kind == "directory":
        cache_file.unlink()
        cache_file.mkdir()


HOSTILE = [
    "corrupt",
    "truncated",
    "truncated-at-a-line",
    "other-version",
    "wrong-types",
    "deep-nesting",
    "fifo",
    "symlink",
    "device",
    "huge",
    "directory",
]


@pytest.mark.parametrize("kind", HOSTILE)
async def test_a_hostile_cache_file_is_ignored_and_rebuilt(
    tmp_path: Path,
    folder: Path,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await _started(tmp_path, folder)
    cache_file = _cache_file(tmp_path, folder)
    _hostile(kind, cache_file, tmp_path)
    # Without the saved index, whose docs would spare the start this file.
    _snapshot_file(tmp_path).unlink()
    reads = _Reads(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="agentd.memory.index_cache"):
        memory = _memory(tmp_path, folder)
        # Bounded: a FIFO opened for reading would wait for a writer forever.
        await asyncio.wait_for(memory.start(), 10)
        await memory.aclose()
    warnings = [r for r in caplog.records if "ignored" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    # Every note read again, and the index is a fresh build's.
    assert len(reads.names) == len(list(folder.iterdir()))
    fresh = await _started(tmp_path, folder, cache=False)
    assert _shape(memory) == _shape(fresh)
    if kind != "directory":
        # Rewritten whole (a symlink replaced, never written through).
        assert not cache_file.is_symlink()
        assert sorted(index_cache.load(cache_file)) == sorted([*NOTES, "plain.md"])
    if kind == "symlink":
        assert (tmp_path / "elsewhere.jsonl").read_bytes().startswith(b'{"format"')


def _hostile_snapshot(kind: str, snapshot_file: Path, tmp_path: Path) -> None:
    """`_hostile` for the saved index; and numbers that do not hold together
    under a valid checksum (what only a checked load refuses)."""
    lines = snapshot_file.read_bytes().split(b"\n")
    header = json.loads(lines[0])
    docs, terms = json.loads(lines[1]), json.loads(lines[2])
    packed = {
        name: index_snapshot._unpacked(
            "d" if name == "table" else index_snapshot._U32,
            memoryview(json.loads(line).encode()),
        )
        for name, line in zip(index_snapshot.PACKED, lines[3:], strict=False)
    }

    def rewrite() -> None:
        rest = [json.dumps(docs).encode(), json.dumps(terms).encode()]
        rest += [b'"' + index_snapshot._packed(packed[n]) + b'"' for n in index_snapshot.PACKED]
        body = b"".join(line + b"\n" for line in rest)
        header["crc32"] = zlib.crc32(body)
        snapshot_file.write_bytes(json.dumps(header).encode() + b"\n" + body)

    if kind == "wrong-types":
        docs[0][4] = "12"  # a length as a string
        rewrite()
    elif kind == "flipped-byte":
        data = snapshot_file.read_bytes()
        other = b"B" if data[-9:-8] == b"A" else b"A"  # inside the last base64 string
        snapshot_file.write_bytes(data[:-9] + other + data[-8:])
    elif kind == "ids-past-the-docs":
        packed["ids"][0] = len(docs)
        rewrite()
    elif kind == "a-term-without-postings":
        packed["df"][0], packed["df"][1] = 0, packed["df"][0] + packed["df"][1]
        rewrite()
    elif kind == "a-weight-of-one":
        packed["table"] = array("d", [1.0] * len(packed["table"]))
        rewrite()
    elif kind == "counts-that-do-not-add-up":
        docs[0][8] += 1
        rewrite()
    elif kind == "not-base64":
        rewrite()
        written = snapshot_file.read_bytes().split(b"\n")
        written[-2] = b'"not base64 at all!"'
        body = b"".join(line + b"\n" for line in written[1:-1])
        header["crc32"] = zlib.crc32(body)
        snapshot_file.write_bytes(json.dumps(header).encode() + b"\n" + body)
    else:
        _hostile(kind, snapshot_file, tmp_path)


HOSTILE_SNAPSHOT = [
    *HOSTILE,
    "flipped-byte",
    "ids-past-the-docs",
    "a-term-without-postings",
    "a-weight-of-one",
    "counts-that-do-not-add-up",
    "not-base64",
]


@pytest.mark.parametrize("kind", HOSTILE_SNAPSHOT)
async def test_a_hostile_saved_index_is_ignored_and_rebuilt(
    tmp_path: Path,
    folder: Path,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await _started(tmp_path, folder)
    snapshot_file = _snapshot_file(tmp_path)
    _hostile_snapshot(kind, snapshot_file, tmp_path)
    reads = _Reads(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="agentd.memory"):
        memory = _memory(tmp_path, folder)
        await asyncio.wait_for(memory.start(), 10)
        await memory.aclose()
    warnings = [r for r in caplog.records if "ignored" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    # The notes from the index cache, and the index a fresh build's.
    assert sorted(reads.names) == ["binary.md", "inside.md"]
    fresh = await _started(tmp_path, folder, cache=False)
    assert _shape(memory) == _shape(fresh)
    if kind != "directory":
        # Written again (a symlink replaced, never written through), and
        # taken by the next start.
        assert not snapshot_file.is_symlink()
        loads = _Loads(monkeypatch)
        again = await _started(tmp_path, folder)
        assert loads.count == 0
        assert _shape(again) == _shape(fresh)


async def test_a_tokenizer_version_bump_reads_every_note_again(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _started(tmp_path, folder)
    monkeypatch.setitem(index_cache._HEADER, "tokenizer", TOKENIZER_VERSION + 1)
    monkeypatch.setattr(index_snapshot, "TOKENIZER_VERSION", TOKENIZER_VERSION + 1)
    reads = _Reads(monkeypatch)
    await _started(tmp_path, folder)
    assert len(reads.names) == len(list(folder.iterdir()))
    # Saved again under the new version: the next start reads from it.
    reads.names.clear()
    await _started(tmp_path, folder)
    assert sorted(reads.names) == ["binary.md", "inside.md"]


def _saved_entries(tmp_path: Path, folder: Path) -> dict[str, index_cache.CacheEntry]:
    """The personal folder's entries as the next start finds them: its index
    cache file with the saved index's delta (`index_delta`) over it."""
    entries = index_cache.load(_cache_file(tmp_path, folder))
    saved = index_snapshot.load(_snapshot_file(tmp_path))
    if saved is not None and saved.id is not None:
        delta = index_delta.load(index_delta.delta_file(_snapshot_file(tmp_path)), saved.id)
        for (team, name), entry in delta.records.items():
            assert not team
            if entry is None:
                entries.pop(name, None)
            else:
                entries[name] = entry
    return entries


async def test_the_watcher_keeps_the_cache_current(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deletion and an edit seen by the watcher are written (debounced, off
    the loop: appended to the saved index's delta); the edit is kept once it
    is old enough to be trusted."""
    monkeypatch.setattr(project, "SAVE_DELAY_S", 0.05)
    monkeypatch.setattr(index_cache, "RACY_NS", 0)
    saved: asyncio.Queue[dict[str, index_cache.CacheEntry]] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    memory = ProjectMemory(
        tmp_path / "ws", directory=folder, watch=True, index_cache_home=tmp_path / "home"
    )
    real_write, real_append = memory._write_caches, memory._append_delta

    def write_caches(*args: Any) -> Any:
        result = real_write(*args)
        loop.call_soon_threadsafe(saved.put_nowait, _saved_entries(tmp_path, folder))
        return result

    def append_delta(*args: Any) -> Any:
        result = real_append(*args)
        loop.call_soon_threadsafe(saved.put_nowait, _saved_entries(tmp_path, folder))
        return result

    monkeypatch.setattr(memory, "_write_caches", write_caches)
    monkeypatch.setattr(memory, "_append_delta", append_delta)
    await memory.start()
    try:
        assert "db.md" in await asyncio.wait_for(saved.get(), 10)  # the first build's
        (folder / "db.md").unlink()
        assert "db.md" not in await asyncio.wait_for(saved.get(), 10)
        _write(folder, "deploy.md", "Deploy checklist", "How we ship", "Now: make sail.")
        os.utime(folder / "deploy.md")  # now: as an editor's save leaves it
        while True:
            entry = (await asyncio.wait_for(saved.get(), 10)).get("deploy.md")
            if entry is not None and "sail" in entry.terms[2]:
                break
        assert entry.identity == index_cache.identity_of(os.stat(folder / "deploy.md"))
    finally:
        await memory.aclose()


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_a_term_never_holds_whitespace(text: str) -> None:
    """The cache joins a field's terms with spaces and splits them back."""
    found = terms(text)
    assert " ".join(found).split() == found


def _by_path(memory: ProjectMemory) -> dict[str, Any]:
    """What an index answers with, whatever ids its docs got: each term's
    postings by path (exact floats), each doc as indexed, the averages."""
    index = memory._index
    path_of = {d.id: str(d.info.path) for d in index.docs()}
    return {
        "avg": index._avg,
        "postings": {
            term: {path_of[i]: w for i, w in found.items()}
            for term, found in index._postings.items()
        },
        "vocab": index._vocab,
        "docs": {
            str(d.info.path): (d.info, d.head, d.content_hash, d.lengths, tuple(d.terms))
            for d in index.docs()
        },
    }


async def test_edits_while_running_are_saved_as_a_delta_and_restored_as_they_were(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notes changed while the daemon runs are indexed with the averages of the
    last build (an edit costs one note's work) and saved as such: appended to
    the saved index's delta, neither the saved index nor the index cache
    written again. The next start takes the saved index with the delta
    applied, without parsing the index cache: the index the daemon had."""
    monkeypatch.setattr(index_cache, "RACY_NS", 0)  # this second's writes trusted
    await _started(tmp_path, folder)
    saved_before = index_cache.identity_of(os.stat(_snapshot_file(tmp_path)))
    cache_before = index_cache.identity_of(os.stat(_cache_file(tmp_path, folder)))
    memory = _memory(tmp_path, folder)
    await memory.start()
    path = folder / "added.md"
    text = "---\nname: Release freeze\ndescription: When not to deploy\n---\nNo deploys.\n"
    path.write_text(text)
    memory.note_own_write(path, text)
    (folder / "camel.md").unlink()
    await memory._apply_topic_changes([(folder / "camel.md", False)])
    _write(folder, "deploy.md", "Deploy checklist", "How we ship", "Run make sail first.")
    await memory._apply_topic_changes([(folder / "deploy.md", False)])
    assert not memory._index.whole
    live = _by_path(memory)
    await memory.aclose()
    assert index_cache.identity_of(os.stat(_snapshot_file(tmp_path))) == saved_before
    assert index_cache.identity_of(os.stat(_cache_file(tmp_path, folder))) == cache_before
    delta = index_delta.delta_file(_snapshot_file(tmp_path))
    assert oct(delta.stat().st_mode & 0o777) == "0o600"
    loads = _Loads(monkeypatch)
    reads = _Reads(monkeypatch)
    warm = await _started(tmp_path, folder)
    assert loads.count == 0
    assert sorted(reads.names) == ["binary.md", "inside.md"]
    assert _by_path(warm) == live
    assert [d.name for d in warm.recall("release freeze").docs] == ["Release freeze"]
    assert "sail" in warm.recall("make sail").docs[0].excerpt
    assert not warm.recall("parseHTTPHeaders").docs
    # The index cache read with the delta over it (a note changed since, so
    # the saved index does not serve): the same notes, only that one read.
    _write(folder, "zh.md", "部署流程", "发布检查清单", "上线前确认监控。")
    reads.names.clear()
    rebuilt = await _started(tmp_path, folder)
    assert sorted(reads.names) == ["binary.md", "inside.md", "zh.md"]
    fresh = await _started(tmp_path, folder, cache=False)
    assert _shape(rebuilt) == _shape(fresh)


async def test_a_team_folder_is_saved_in_the_same_index(tmp_path: Path, folder: Path) -> None:
    ws = tmp_path / "ws"
    team = ws / ".agentd" / "memory"
    team.mkdir(parents=True)
    _write(team, "team.md", "Team deploys", "Shared checklist", "Deploy windows are Tuesdays.")
    _write(team, "zh.md", "团队部署", "共享清单", "周二发布窗口。")

    async def started(cache: bool) -> ProjectMemory:
        home = tmp_path / "home" if cache else None
        memory = ProjectMemory(ws, directory=folder, watch=False, index_cache_home=home)
        await memory.start()
        await memory.aclose()
        return memory

    await started(True)
    warm = await started(True)
    fresh = await started(False)
    assert _shape(warm) == _shape(fresh)
    assert sum(d.info.team for d in warm._index.docs()) == 2
    assert warm.recall("deploy windows tuesdays").docs[0].name == "Team deploys"


async def test_a_saved_index_takes_edits_and_queries_as_a_built_one(
    tmp_path: Path, folder: Path
) -> None:
    """The saved index's postings and docs' terms are made at first use
    (`index_snapshot.SavedPostings`, `SavedTerms`): queries, an edit and a
    removal on it give what they give on a fresh build."""
    await _started(tmp_path, folder)
    warm = await _started(tmp_path, folder)
    fresh = await _started(tmp_path, folder, cache=False)
    saved, built = warm._index, fresh._index
    assert isinstance(saved._postings, index_snapshot.SavedPostings)
    saved_terms = [d.terms for d in saved.docs()]
    assert all(isinstance(t, index_snapshot.SavedTerms) for t in saved_terms)
    assert saved_terms == [d.terms for d in built.docs()]
    for query in ("ship releases", "部署", "pool size pgbouncer", "nothing matches this"):
        found = terms(query)
        assert saved.search(found) == saved.search_exhaustive(found)
        hits = [(h.doc.info.path, h.score) for h in saved.search(found)]
        assert hits == [(h.doc.info.path, h.score) for h in built.search(found)], query
    for index in (saved, built):
        index.remove(str(folder / "db.md"))
        doc = store.parse_topic(
            folder / "deploy.md",
            b"---\nname: Deploy\n---\nmake sail with pgbouncer\n",
            size=40,
            mtime=1.0,
            team=False,
        )
        index.upsert(doc)
    assert _shape(warm) == _shape(fresh)
    assert saved.postings().get("nonexistent") is None
    assert saved._postings.pop("nonexistent", "gone") == "gone"


def _entry(name: str, body: str) -> index_cache.CacheEntry:
    return index_cache.CacheEntry(
        identity=(len(body), 1, 2, 3),
        content_hash=name * 2,
        name=name,
        description="d",
        type="project",
        problems=(),
        head=body,
        terms=(name, "d", body),
        verified=True,
    )


def test_a_delta_file_reads_back_its_records_later_ones_winning(tmp_path: Path) -> None:
    target = tmp_path / "home" / "cache" / "memory-index" / "x.delta"
    first = index_delta.encode([(False, "a.md", _entry("a", "one")), (True, "b.md", None)])
    second = index_delta.encode([(False, "a.md", _entry("a", "two"))])
    assert first is not None and second is not None
    size = index_delta.append(target, "base1", first, 0)
    assert size == target.stat().st_size
    size = index_delta.append(target, "base1", second, size)
    assert size == target.stat().st_size
    delta = index_delta.load(target, "base1")
    assert delta.clean and delta.size == size
    assert delta.records == {(False, "a.md"): _entry("a", "two"), (True, "b.md"): None}
    # Another saved index's delta, or one appended to as another's: not used.
    assert index_delta.load(target, "base2").records == {}
    assert index_delta.append(target, "base2", second, size) is None
    # Shorter than this daemon left it (replaced): not appended to.
    assert index_delta.append(target, "base1", second, size + 1) is None


@pytest.mark.parametrize(
    "damage",
    ["torn", "crc", "not json", "bad row", "no newline", "garbage line"],
)
def test_a_damaged_delta_keeps_the_lines_before_the_damage(tmp_path: Path, damage: str) -> None:
    target = tmp_path / "home" / "cache" / "memory-index" / "x.delta"
    good = index_delta.encode([(False, "a.md", _entry("a", "one"))])
    later = index_delta.encode([(False, "b.md", _entry("b", "two"))])
    assert good is not None and later is not None
    size = index_delta.append(target, "base", good, 0)
    assert size is not None
    data = target.read_bytes()
    if damage == "torn":
        data += later[: len(later) // 2]
    elif damage == "crc":
        data += later.replace(b"two", b"twO")
    elif damage == "not json":
        body = b"[[false,"
        data += b"%08x " % zlib.crc32(body) + body + b"\n"
    elif damage == "bad row":
        body = json.dumps([[False, "b.md", ["b.md", "x"]]]).encode()
        data += b"%08x " % zlib.crc32(body) + body + b"\n"
    elif damage == "no newline":
        data += later[:-1]
    else:
        data += b"\xff\xfe garbage\n"
    target.write_bytes(data + later)
    delta = index_delta.load(target, "base")
    assert not delta.clean
    assert delta.records == {(False, "a.md"): _entry("a", "one")}
    # Never appended to past the damage: the next save writes whole instead.
    if damage in ("torn", "no newline"):
        target.write_bytes(data)
        assert index_delta.append(target, "base", later, len(data)) is None


def test_a_hostile_delta_file_is_ignored(tmp_path: Path) -> None:
    folder = tmp_path / "home" / "cache" / "memory-index"
    folder.mkdir(parents=True)
    target = folder / "x.delta"
    os.mkfifo(target)
    assert index_delta.load(target, "base").records == {}
    line = index_delta.encode([(False, "a.md", None)])
    assert line is not None
    assert index_delta.append(target, "base", line, 10) is None
    target.unlink()
    (tmp_path / "elsewhere").write_bytes(b"")
    target.symlink_to(tmp_path / "elsewhere")
    assert index_delta.load(target, "base").records == {}
    assert index_delta.append(target, "base", line, 10) is None
    assert (tmp_path / "elsewhere").read_bytes() == b""


async def test_a_delta_past_its_share_is_folded_into_a_whole_save(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the delta is past its share of the saved index, the next save
    writes the index cache and the saved index whole (a fresh build of the
    folder) and removes the delta. The symlinked note, which has no index
    cache entry, is in that build too (read for it): the next start takes
    the saved index, reading that note alone."""
    monkeypatch.setattr(index_cache, "RACY_NS", 0)
    monkeypatch.setattr(project, "FOLD_MIN_BYTES", 0)
    monkeypatch.setattr(project, "FOLD_SHARE", 10**9)
    await _started(tmp_path, folder)
    saved_id = index_snapshot.load(_snapshot_file(tmp_path)).id  # type: ignore[union-attr]
    delta = index_delta.delta_file(_snapshot_file(tmp_path))
    memory = _memory(tmp_path, folder)
    await memory.start()
    try:
        _write(folder, "deploy.md", "Deploy checklist", "How we ship", "Run make sail first.")
        await memory._apply_topic_changes([(folder / "deploy.md", False)])
        await memory._save_cache()
        assert delta.exists()  # the first save after the build: appended
        _write(folder, "db.md", "Database notes", "Postgres pooling", "Pool size is 40.")
        await memory._apply_topic_changes([(folder / "db.md", False)])
        await memory._save_cache()
        assert not delta.exists()
        now = index_snapshot.load(_snapshot_file(tmp_path))
        assert now is not None and now.id not in (None, saved_id) and now.id == memory._base
        assert "sail" in index_cache.load(_cache_file(tmp_path, folder))["deploy.md"].terms[2]
    finally:
        await memory.aclose()
    loads = _Loads(monkeypatch)
    reads = _Reads(monkeypatch)
    warm = await _started(tmp_path, folder)
    assert loads.count == 0
    # The symlink, and the skipped file (never in an index): no other note.
    assert sorted(reads.names) == ["binary.md", "inside.md"]
    fresh = await _started(tmp_path, folder, cache=False)
    assert _shape(warm) == _shape(fresh)
