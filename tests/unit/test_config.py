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


def test_model_settings_from_file_in_snake_or_camel_case(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        'max_output_tokens = 20000\nreasoning_effort = "high"\n'
        "reasoning_model = true\nthinking = { budget_tokens = 8000 }\n"
    )
    s = load_settings(None, env={}, config_file=cfg)
    assert s.problems == ()
    pc = s.provider_config()
    assert (pc.max_output_tokens, pc.reasoning_effort, pc.thinking_budget) == (20000, "high", 8000)
    assert pc.reasoning_model is True and pc.replay_reasoning is None and pc.prompt_caching
    camel = load_settings(
        {"thinking": {"budgetTokens": 4096}, "promptCaching": False, "replayReasoning": True},
        env={},
        config_file=tmp_path / "x",
    )
    pc = camel.provider_config()
    assert (pc.thinking_budget, pc.prompt_caching, pc.replay_reasoning) == (4096, False, True)


def test_model_settings_from_the_environment(tmp_path: Path) -> None:
    env = {
        "AGENTD_MAX_OUTPUT_TOKENS": "16000",
        "AGENTD_REASONING_EFFORT": "low",
        "AGENTD_THINKING_BUDGET": "2048",
    }
    pc = load_settings(None, env=env, config_file=tmp_path / "x").provider_config()
    assert (pc.max_output_tokens, pc.reasoning_effort, pc.thinking_budget) == (16000, "low", 2048)


def test_bad_model_settings_are_problems_and_stay_off(tmp_path: Path) -> None:
    s = load_settings(
        {"reasoningEffort": "extreme", "thinking": {"budgetTokens": 100}},
        env={},
        config_file=tmp_path / "x",
    )
    assert s.reasoning_effort is None and s.thinking is None
    assert any("reasoningEffort" in p for p in s.problems)
    assert any("thinking" in p for p in s.problems)
    # A budget the API would refuse with every request: thinking off, and said so.
    s = load_settings(
        {"maxOutputTokens": 4000, "thinking": {"budgetTokens": 4000}},
        env={},
        config_file=tmp_path / "x",
    )
    assert s.thinking is None and s.max_output_tokens == 4000
    assert s.problems == (
        "setting thinking.budgetTokens: 4000 must be below maxOutputTokens (4000); thinking is off",
    )


def test_preconnect_is_on_unless_turned_off(tmp_path: Path) -> None:
    none = tmp_path / "x"
    assert load_settings(None, env={}, config_file=none).preconnect is True
    assert load_settings(None, env={"AGENTD_PRECONNECT": "0"}, config_file=none).preconnect is False
    assert load_settings({"preconnect": False}, env={}, config_file=none).preconnect is False
