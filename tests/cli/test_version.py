"""``qconform --version``, and the package's version read only when asked (docs/accumulated.md,
"Start-up": reading it at import cost every command and every adapter child its start)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

import pytest
from click.testing import CliRunner

from qconform.cli.group import cli

pytestmark = pytest.mark.rules()


def installed_version() -> str:
    try:
        return version("qconform")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def test_version_option_prints_the_installed_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"qconform, version {installed_version()}\n"


def test_importing_the_command_line_does_not_read_the_package_metadata():
    code = "import sys, qconform.cli; print('importlib.metadata' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_an_unknown_attribute_of_the_package_is_an_attribute_error():
    import qconform

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        qconform.nope  # noqa: B018
