"""Where an engine adapter finds its environment (adapters/engine_env.py): the variable, the
cache, the checkout's link, the current directory's link, or one line naming them all."""

from __future__ import annotations

import subprocess
import sys

import pytest

from qconform.adapters import engine_env, transformers, vllm
from qconform.adapters.engine_env import EngineEnvironment, EngineSetupError

ENGINE = EngineEnvironment("toy", "toy-engine", "1.0")


def make_python(env):
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").touch()
    return env / "bin" / "python"


@pytest.fixture
def places(monkeypatch, tmp_path):
    """A cache root, a checkout and a working directory of their own, none with an environment."""
    for variable in ("QCONFORM_TOY_PYTHON", "QCONFORM_TOY_VERSION"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("QCONFORM_ENGINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(engine_env, "CHECKOUT", tmp_path / "checkout")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path


def test_a_finished_cache_comes_before_the_checkout(places):
    link = make_python(places / "checkout" / ".venv-toy")
    assert ENGINE.python() == link  # nothing in the cache yet
    cached = make_python(places / "cache" / "toy-engine-1.0")
    assert ENGINE.python() == link  # the cache is not finished: install.sh was cut short
    (places / "cache" / "toy-engine-1.0" / engine_env.COMPLETE_MARK).touch()
    assert ENGINE.python() == cached


def test_an_editable_install_from_another_checkout_finds_the_working_directory(places):
    here = make_python(places / "work" / ".venv-toy")
    assert ENGINE.python() == here.resolve()


def test_the_version_is_a_parameter(places, monkeypatch):
    make_python(places / "cache" / "toy-engine-1.0")
    (places / "cache" / "toy-engine-1.0" / engine_env.COMPLETE_MARK).touch()
    monkeypatch.setenv("QCONFORM_TOY_VERSION", "0.9")
    with pytest.raises(EngineSetupError, match=r"no toy 0\.9 environment"):
        ENGINE.python()


def test_nothing_found_is_one_line_naming_every_place(places):
    with pytest.raises(EngineSetupError) as raised:
        ENGINE.python()
    message = str(raised.value)
    assert "\n" not in message and "bash adapters/toy/install.sh" in message and "QCONFORM_TOY_PYTHON" in message
    for place in ENGINE.places():
        assert str(place) in message
    assert len(ENGINE.places()) == 3


def test_the_variable_is_the_only_place_when_set(places, monkeypatch):
    make_python(places / "checkout" / ".venv-toy")
    monkeypatch.setenv("QCONFORM_TOY_PYTHON", str(places / "elsewhere" / "python"))
    with pytest.raises(EngineSetupError, match="elsewhere"):
        ENGINE.python()


def test_transformers_adapter_names(monkeypatch, tmp_path):
    monkeypatch.setenv("QCONFORM_TRANSFORMERS_PYTHON", str(tmp_path / "python"))
    (tmp_path / "python").touch()
    command = transformers.shim_command("transformers:strict-accept")
    assert command[0] == str(tmp_path / "python") and command[1].endswith("adapters/transformers/shim.py")
    assert command[2:] == ["--patch", "strict-accept", "--device", "cpu"]
    with pytest.raises(EngineSetupError, match="unknown transformers option bogus; options: strict-accept"):
        transformers.shim_command("transformers:bogus")
    assert vllm.ENVIRONMENT.link == ".venv-vllm" and transformers.ENVIRONMENT.link == ".venv-transformers"


@pytest.mark.parametrize(
    "adapter, variable, said",
    [
        ("transformers", "QCONFORM_TRANSFORMERS_PYTHON", "no transformers 5.23.0 environment"),
        ("vllm", "QCONFORM_VLLM_PYTHON", "no vllm 0.32.0 environment (looked at"),
    ],
)
def test_run_without_the_engine_environment_is_one_line_and_exit_2(tmp_path, adapter, variable, said):
    env = {variable: str(tmp_path / "missing"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "qconform", "run", "--adapter", adapter, "--family", "verification_round"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in result.stderr
