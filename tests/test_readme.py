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
