from __future__ import annotations

from agentd.memory.tokenize import is_weak, normalize, stem, terms


def test_nfkc_and_case_folding() -> None:
    full_width_api = "\uff21\uff30\uff29"  # "API" in full-width letters
    assert normalize(full_width_api) == "API"
    assert terms("\uff31\uff37\uff25\uff2e " + full_width_api) == ["qwen", "api"]
    assert terms("STRASSE Straße") == ["strasse", "strasse"]
    assert terms("ｶﾀｶﾅ") == terms("カタカナ")  # half-width kana


def test_english_words_stopwords_and_stems() -> None:
    assert terms("The migrations are running on the switches") == [
        "migration",
        "run",
        "switch",
    ]
    assert stem("policies") == "policy"
    assert stem("focused") == "focus"
    assert stem("shipping") == "ship"
    assert stem("process") == "process"
    assert stem("status") == "status"
    assert terms("a I x") == []  # stopwords and one-letter words


def test_identifiers_split() -> None:
    assert terms("getUserName test_memory_recall HTTPServer") == [
        "getusername",
        "user",
        "name",
        "test",
        "memory",
        "recall",
        "httpserver",
        "http",
        "server",
    ]


def test_chinese_bigrams() -> None:
    assert terms("生产部署") == ["生产", "产部", "部署"]
    # 我们 is a function-word bigram: it goes, and so does 们的, which overlaps it.
    assert terms("我们的部署") == ["的部", "部署"]
    # A question around one word keeps the word, not the bigrams into 怎么.
    assert terms("部署怎么做") == ["部署"]
    assert terms("확인합니다") == ["확인"]


def test_japanese_particles_at_script_boundaries() -> None:
    assert terms("コードレビューの基準") == ["コー", "ード", "ドレ", "レビ", "ビュ", "ュー", "基準"]
    # All-hiragana text keeps its bigrams even where they contain particle kana.
    assert "よく" in terms("よくあるしつもん")


def test_korean_bigrams_and_single_chars() -> None:
    assert terms("로그인 문제") == ["로그", "그인", "문제"]
    assert terms("배") == ["배"]
    assert is_weak("배") and is_weak("部") and not is_weak("부서")


def test_mixed_scripts() -> None:
    assert terms("Qwen API 限流") == ["qwen", "api", "限流"]
    assert terms("deployment发布说明") == ["deployment", "发布", "布说", "说明"]
    assert terms("p99 2024 v2") == ["p99", "2024", "v2"]
