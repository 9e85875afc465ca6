"""README says what happens: its spec example is the shipped quickstart, its commands exist."""

import re

import yaml

from tests.conftest import ROOT


def test_the_spec_example_is_the_shipped_quickstart():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## A sweep spec"):]
    example = re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1)
    shipped = yaml.safe_load((ROOT / "sweeps" / "quickstart.yaml").read_text())
    assert yaml.safe_load(example) == shipped


def test_the_two_commands_come_first_and_exist():
    text = (ROOT / "README.md").read_text()
    first = re.search(r"```bash\n(.*?)```", text, re.DOTALL).group(1).splitlines()
    assert [line.split()[:2] for line in first] == [["bash", "scripts/quickstart.sh"],
                                                   ["bash", "scripts/test.sh"]]
    assert (ROOT / "scripts" / "quickstart.sh").is_file()
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_the_command_list_names_every_command_and_the_sections_the_cli_points_to_exist():
    """README's command list names each subcommand of the parser, and every README section a
    command's output points to ("README.md, \"SECTION\"") is a heading there."""
    from workbench.cli.main import build_parser

    text = (ROOT / "README.md").read_text()
    listing = text.split("## The command line", 1)[1].split("```", 2)[1]
    commands = build_parser()._subparsers._group_actions[0].choices
    assert [c for c in commands if f"workbench {c}" not in listing] == []
    headings = set(re.findall(r"^#+ (.+)$", text, re.MULTILINE))
    cited = set()
    for source in (ROOT / "workbench" / "cli").glob("*.py"):
        cited |= set(re.findall(r'README(?:\.md)?, \\?"([^"\\]+)\\?"', source.read_text()))
    assert cited and cited <= headings, cited - headings
