"""The scripts' counts and outputs are checked before their setup (a server, a warm-up race), each refused by name."""

import importlib

import pytest


@pytest.mark.parametrize(
    ("script", "argv", "message"),
    [
        ("paper_race", ["--rounds", "0"], "--rounds must be a positive integer, got 0"),
        ("paper_race", ["--json", "/"], "--json '/': / is a folder, not a file"),  # before the rounds' work
        ("soak", ["--sessions", "0"], "--sessions must be a positive integer, got 0"),
        ("load_test", ["--visitors", "1,,2"], "--visitors must be a comma list of whole numbers, got '1,,2'"),
        ("screenshots", ["--sweep-prompts", "0"], "--sweep-prompts must be in [1, 50], got 0"),
        ("busy_core", ["--n", "0"], "--n must be a positive integer, got 0"),
        ("busy_core", ["--max-seconds", "-5"], "--max-seconds must be a positive integer, got -5"),
    ],
)
def test_a_bad_count_or_output_is_refused_before_anything_runs(script, argv, message, capsys):
    main = importlib.import_module(f"scripts.{script}").main
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and f"error: {message}" in capsys.readouterr().err
