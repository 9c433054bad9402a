"""README's set-up and test commands are what CI runs, and the server they start watches no files (issue 24)."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_block(after_heading: str) -> list[str]:
    """The command lines of the first ```bash block under a README heading."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(f"## {after_heading}\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_ci_follows_readme_set_up_and_test_commands_in_order():
    setup = [c for c in readme_block("Set up and run") if not c.startswith("streamlit run")]
    test = readme_block("Test")
    assert setup[0] == "python3 -m venv .venv" and test == ["python -m pytest"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    where = []
    for command in setup + test:
        hits = [i for i, line in enumerate(ci) if line == command]
        assert hits, f".ci/run does not run README's `{command}`"
        where.append(hits[0])
    assert where == sorted(where), "`.ci/run` must run README's commands in README's order"


def test_streamlit_config_turns_the_file_watcher_off():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["fileWatcherType"] == "none"
    assert config["server"].get("runOnSave", False) is False


def test_pytest_never_collects_from_a_virtual_environment():
    ini = (ROOT / "pytest.ini").read_text()
    dirs = re.search(r"^norecursedirs\s*=\s*(.+)$", ini, re.M).group(1).split()
    assert ".*" in dirs and "venv" in dirs  # .venv, .git; and a venv named venv
