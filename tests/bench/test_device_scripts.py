"""The prepared device calls' shell parts (bench/README.md, "GPU check"): bench/device_ranks.sh pins
its ranks to one hardware thread of each physical core, as the kernel's topology lists them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "device_ranks.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the device scripts are bash")


def physical_cpus(tmp_path: Path, siblings: list[str], want: int) -> subprocess.CompletedProcess:
    """``physical_cpus WANT`` of device_ranks.sh over a sysfs cpu folder whose CPU i lists ``siblings[i]``."""
    for cpu, listed in enumerate(siblings):
        folder = tmp_path / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "thread_siblings_list").write_text(listed + "\n")
    text = SCRIPT.read_text()
    function = text[text.index("physical_cpus() {") : text.index("\n}\n", text.index("physical_cpus() {")) + 3]
    return subprocess.run(
        ["bash", "-c", f"{function}physical_cpus {want}"],
        capture_output=True,
        text=True,
        env={"QCONFORM_SYS_CPU": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=False,
    )


@pytest.mark.parametrize(
    "siblings, want, cpus",
    [
        (["0,4", "1,5", "2,6", "3,7", "0,4", "1,5", "2,6", "3,7"], 4, "0,1,2,3"),  # threads numbered core-major
        (["0-1", "0-1", "2-3", "2-3", "4-5", "4-5", "6-7", "6-7"], 4, "0,2,4,6"),  # pairs side by side
        (["0-1", "0-1", "2-3", "2-3"], 2, "0,2"),
        ([str(cpu) for cpu in range(12)], 4, "0,1,2,3"),  # no hyperthreads
        (["0,8", "1,9", "2,10", "3,11", "4,12", "5,13", "6,14", "7,15"] * 2, 2, "0,1"),
    ],
)
def test_the_ranks_go_to_one_thread_of_each_physical_core(tmp_path, siblings, want, cpus):
    done = physical_cpus(tmp_path, siblings, want)
    assert done.returncode == 0 and done.stdout.strip() == cpus, done.stderr


def test_fewer_physical_cores_than_ranks_is_one_line_and_a_failure(tmp_path):
    done = physical_cpus(tmp_path, ["0-1", "0-1", "2-3", "2-3"], 4)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == "device: fewer than 4 physical cores"
