"""Settings precedence (file < environment < initializationOptions); bad values never fail."""

from __future__ import annotations

from pathlib import Path

from agentd.config import load_settings


def test_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        'base_url = "http://file/v1"\nmodel = "file-model"\nfast_model = "file-fast"\n'
        "[limits]\nmax_steps_per_prompt = 7\n"
    )
    s = load_settings(
        {"model": "editor-model"},
        env={"AGENTD_BASE_URL": "http://env/v1", "AGENTD_MODEL": "env-model"},
        config_file=cfg,
    )
    assert s.base_url == "http://env/v1"
    assert s.model == "editor-model"
    assert s.fast_model == "file-fast"
    assert s.limits.max_steps_per_prompt == 7
    assert s.provider_config().fast_model == "file-fast"


def test_bad_values_fall_back_to_defaults_with_a_problem(tmp_path: Path) -> None:
    s = load_settings(
        {"provider": "martian", "limits": {"maxStepsPerPrompt": -3}},
        env={},
        config_file=tmp_path / "missing.toml",
    )
    assert s.provider == "openai"
    assert s.limits.max_steps_per_prompt == 40
    assert any("provider" in p for p in s.problems)


def test_broken_config_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text("this is = = not toml")
    s = load_settings(None, env={}, config_file=cfg)
    assert s.problems and "config.toml" in s.problems[0]


def test_api_key_is_never_in_repr(tmp_path: Path) -> None:
    s = load_settings(None, env={"AGENTD_API_KEY": "sk-very-secret"}, config_file=tmp_path / "x")
    assert "sk-very-secret" not in repr(s)
    assert "sk-very-secret" not in repr(s.provider_config())
    assert s.provider_config().api_key == "sk-very-secret"


def test_memory_off_from_env(tmp_path: Path) -> None:
    s = load_settings(None, env={"AGENTD_MEMORY": "off"}, config_file=tmp_path / "x")
    assert s.memory.enabled is False


def test_context_window_and_compaction_settings(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    # A table by model name keeps the names as written (no camelCase).
    cfg.write_text(
        '[context_window]\n"qwen3_coder_local" = 65536\n"gpt-4o" = 100000\n'
        "[compaction]\nthreshold = 0.7\nkeep_recent = 0.25\n"
    )
    s = load_settings({}, env={}, config_file=cfg)
    assert s.context_window_for("qwen3_coder_local") == 65_536
    assert s.context_window_for("gpt-4o") == 100_000
    assert s.context_window_for("other") == 0
    assert (s.compaction.threshold, s.compaction.keep_recent) == (0.7, 0.25)
    # The environment's one number applies to the main model, whatever its name.
    s = load_settings({}, env={"AGENTD_CONTEXT_WINDOW": "32768"}, config_file=cfg)
    assert s.context_window_for("anything") == 32_768
    s = load_settings(
        {"contextWindow": 8192},
        env={"AGENTD_CONTEXT_WINDOW": "32768"},
        config_file=tmp_path / "none.toml",
    )
    assert s.context_window_for("m") == 8192
    bad = load_settings(
        {"compaction": {"threshold": 3}},
        env={"AGENTD_CONTEXT_WINDOW": "lots"},
        config_file=tmp_path / "none.toml",
    )
    assert bad.context_window_for("m") == 0 and bad.compaction.threshold == 0.8
    assert any("contextWindow" in p for p in bad.problems)
    assert any("compaction.threshold" in p for p in bad.problems)
