"""Text to index terms, shared by indexing and queries so both sides agree.

- NFKC first (full-width Latin letters become ASCII, half-width kana become
  full-width), then case folding.
- Scripts written with spaces: word tokens, split at punctuation and
  underscores, camelCase parts added, English stopwords dropped, a light
  suffix stemmer (plurals, -ing, -ed); prefix matching lives in the index.
- Chinese, Japanese, Korean: overlapping character bigrams of each run. A run
  of one character yields a unigram, which ranks but never counts as evidence
  on its own (a lone ``部`` matches too much to mean anything).
- In Japanese, particles sit where kana meet kanji or katakana
  (``コードレビューの基準``); bigrams that straddle such a boundary through a
  particle are dropped, while all-hiragana text keeps every bigram.
- Function-word bigrams (``怎么``, ``です``, ``합니``) are dropped, and so are
  the bigrams that overlap one by a character (``部署怎么做`` keeps ``部署``
  only): they straddle a word boundary and mean nothing, yet would count as
  words of the query that no note holds.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

# Bumped whenever `terms` gives other terms for some text: the index cache
# (`agentd.memory.index_cache`) keeps terms made by this code, and a cache of
# another version is rebuilt, never mixed with fresh terms.
TOKENIZER_VERSION = 1

# Han (+ extension A, compatibility), kana, Hangul syllables and jamo.
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_HIRAGANA = "\u3041-\u309f"
_KATAKANA = "\u30a0-\u30ff\u31f0-\u31ff"
_HANGUL = "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"
_CJK = _HAN + _HIRAGANA + _KATAKANA + _HANGUL

_TOKEN = re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+)")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_HAS_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")
# A character that `_TOKEN` would put in a token and that is not ASCII (a
# letter or digit of another script, or anything of a CJK block): text without
# one takes the ASCII path of `terms`.
_NOT_ASCII_WORDS = re.compile(rf"[^\W\x00-\x7f]|[{_CJK}]")
_NOT_ASCII = re.compile(r"[^\x00-\x7f]+")
# `_HAS_CAMEL`, written to start at an upper-case letter: `search` then skips
# to candidates in C instead of trying two patterns at every character.
_CAMEL_AT = re.compile(r"[A-Z](?:(?<=[a-z].)|(?=[A-Z][a-z]))")
# ASCII letters and digits kept (or lowered), everything else a space.
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_ASCII_WORDS = {i: chr(i) if chr(i) in _ALNUM else " " for i in range(128)}
_ASCII_LOWER_WORDS = {i: chr(i).lower() if chr(i) in _ALNUM else " " for i in range(128)}

_ENGLISH_STOPWORDS = """
a about above after again against all also am an and any are aren arent as at be because been
before being below between both but by can cannot could couldn did didn do does doesn doing
don dont down during each eg etc few for from further get got had hadn has hasn have haven
having he her here hers herself him himself his how i ie if in into is isn it its itself just
let me more most mustn my myself no nor not now of off on once only or other ought our ours
ourselves out over own please same shan she should shouldn so some such than thank thanks that
the their theirs them themselves then there these they this those through to too under until
up us very via was wasn we were weren what when where which while who whom why will with won
would wouldn you your yours yourself yourselves hi hello hey ok okay
"""
ENGLISH_STOPWORDS = frozenset(_ENGLISH_STOPWORDS.split())

# Japanese particles: dropped only where they join kana to kanji/katakana.
_JA_PARTICLES = frozenset("のはがをにへとでもやかねよ")

# Function-word bigrams of Chinese, Japanese and Korean (question words,
# pronouns, copulas, verb endings): frequent everywhere, evidence of nothing.
_CJK_STOP_BIGRAMS = """
我们 你们 他们 她们 它们 这个 那个 这些 那些 什么 怎么 怎样 如何 为什
一个 一下 可以 没有 就是 还是 但是 因为 所以 如果 这样 那样 已经 的话
这里 那里 哪里 请问 我的 你的 他的 是否 是不 不是 的是
です ます でし まし した して する され ある いる なる こと もの これ
それ あれ この その あの から まで ので など くだ ださ さい
니다 습니 입니 합니 있는 하는 하고 그리 리고 그러 그래 래서 하지 지만
에서 으로 에게 이다 있다 없다 하다 된다 한다 있습 없습
"""
CJK_STOP_BIGRAMS = frozenset(_CJK_STOP_BIGRAMS.split())


def normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def is_word_term(term: str) -> bool:
    """True for terms of space-separated scripts (those get prefix matching)."""
    m = _TOKEN.match(term)
    return m is not None and m.group(2) is not None


def stem(word: str) -> str:
    """A light English suffix stripper; it only has to agree with itself."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if (word.endswith("es") and word[-3] in "sxz") or word.endswith(("ches", "shes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    for suffix, min_len in (("ing", 6), ("ed", 5)):
        if word.endswith(suffix) and len(word) >= min_len:
            root = word[: -len(suffix)]
            # "shipping" -> "shipp" -> "ship"; "installed" -> "install" keeps its "ll".
            if len(root) > 3 and root[-1] == root[-2] and root[-1] not in "lsz":
                root = root[:-1]
            return root
    return word


# Bounded well below the daemon's footprint: each new word of a long session
# adds an entry (a soak showed 65,536 entries would cost about 9 MiB).
@lru_cache(maxsize=8192)
def _term_of(word: str) -> str | None:
    """The term of one case-folded word: its stem, or None for a stopword or a
    single character. Cached, so that a word seen before costs no Python call."""
    if len(word) < 2 or word in ENGLISH_STOPWORDS:
        return None
    return stem(word)


def _word_terms(raw: str, out: list[str]) -> None:
    parts = [raw]
    if _HAS_CAMEL.search(raw):
        parts.extend(_CAMEL.findall(raw))
    for part in parts:
        term = _term_of(part.casefold())
        if term is not None:
            out.append(term)


def _boundary_particle(a: str, b: str) -> bool:
    """Does the bigram ``ab`` join kana to kanji/katakana through a particle?"""
    # Range checks of one character each: `_HIRAGANA`, without a regex call.
    a_hira = "\u3041" <= a <= "\u309f"
    b_hira = "\u3041" <= b <= "\u309f"
    if a_hira == b_hira:
        return False
    particle = a if a_hira else b
    return particle in _JA_PARTICLES


def _cjk_terms(run: str, out: list[str]) -> None:
    if len(run) == 1:
        if run not in _JA_PARTICLES:
            out.append(run)
        return
    grams = [run[i : i + 2] for i in range(len(run) - 1)]
    stop = [gram in CJK_STOP_BIGRAMS for gram in grams]
    last = len(grams) - 1
    for i, gram in enumerate(grams):
        if stop[i] or (i > 0 and stop[i - 1]) or (i < last and stop[i + 1]):
            continue
        if _boundary_particle(gram[0], gram[1]):
            continue
        out.append(gram)


def terms(text: str) -> list[str]:
    """Index terms of ``text`` in order, with repeats (term frequency counts)."""
    if text.isascii():
        # NFKC leaves ASCII as it is; skipping the call saves a prompt's local
        # recall about 10 us when it runs cold, as it does before the request.
        return _ascii_terms(text)
    text = normalize(text)
    if text.isascii():
        return _ascii_terms(text)
    other = "".join(_NOT_ASCII.findall(text))
    if _NOT_ASCII_WORDS.search(other) is None:
        # Dashes, arrows, curly quotes: they only separate words, as a space does.
        return _ascii_terms(_NOT_ASCII.sub(" ", text))
    return _general_terms(text)


def _general_terms(text: str) -> list[str]:
    """`terms` of NFKC text, one token at a time: the reference for every script."""
    out: list[str] = []
    for cjk, word in _TOKEN.findall(text):
        if cjk:
            _cjk_terms(cjk.casefold(), out)
        else:
            _word_terms(word, out)
    return out


def _ascii_terms(text: str) -> list[str]:
    """`terms` of ASCII text: the same list as `_general_terms`, several times
    faster. Building an index spends most of its time here, and most notes are
    English.

    Separators become spaces and letters lower case in one `str.translate`,
    `split` finds the words (casefold is lower in ASCII, and lowering moves no
    word boundary), and `map` looks each up in `_term_of`'s cache, all in C
    loops. Words in camelCase, when the text has any, take `_word_terms`."""
    if _CAMEL_AT.search(text) is None:
        words = text.translate(_ASCII_LOWER_WORDS).split()
        return list(filter(None, map(_term_of, words)))
    out: list[str] = []
    for word in text.translate(_ASCII_WORDS).split():
        if word.islower() or _HAS_CAMEL.search(word) is None:
            term = _term_of(word.lower())
            if term is not None:
                out.append(term)
        else:
            _word_terms(word, out)
    return out


def is_weak(term: str) -> bool:
    """A term that may rank a doc but is never evidence on its own."""
    return len(term) < 2
