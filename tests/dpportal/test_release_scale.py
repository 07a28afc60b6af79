"""Issue 8, per-commit scale test: a perturbed-histogram release of a 10^6-row table, end to end
through release_engine.compute from its Parquet copy, runs in a child process whose address
space is capped (resource.setrlimit RLIMIT_AS) at what it had after imports plus LIMIT_MB.

Record batches of CHUNK_ROWS rows keep the release within the cap. Twins: the path before
chunking (the two columns read whole) does not complete under the same cap, and the same child
asking for more than LIMIT_MB fails, so the cap is real. Timing is measured by
benchmarks/release_scale.py, never asserted here. About 10 s (20 s if the twin stalls).
"""

import importlib.util
import subprocess

import pytest

from tests.conftest import REPO_ROOT

ROWS = 10**6
CHUNK_ROWS = 1 << 15
LIMIT_MB = 80  # fails near 40 MB (pyarrow's buffers, the synthetic rows, the package files)


def benchmark_module():
    spec = importlib.util.spec_from_file_location(
        "release_scale", REPO_ROOT / "benchmarks" / "release_scale.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def scale():
    return benchmark_module()


@pytest.fixture(scope="module")
def parquet(scale, tmp_path_factory):
    path = tmp_path_factory.mktemp("release-scale") / "table.parquet"
    scale.write_parquet(path, ROWS)
    return path


def test_a_release_of_a_million_rows_runs_within_a_memory_cap(scale, parquet):
    result = scale.run_child("chunked", parquet, 1000, limit_mb=LIMIT_MB, chunk_rows=CHUNK_ROWS)
    print(
        f"\nrelease of {ROWS:,} rows in batches of {CHUNK_ROWS:,} under imports + {LIMIT_MB} "
        f"MB of address space: peak RSS {result['peak_mb']:.0f} MB "
        f"({result['peak_mb'] - result['imports_mb']:.0f} MB above imports)"
    )
    assert result["cells"] == 21 * 10  # (20 bins + "(missing)") x (8 + "(other)" + "(missing)")


def test_the_whole_table_path_does_not_fit_the_same_cap(scale, parquet):
    """Twin: out of memory, it aborts or stalls (pyarrow's threads); a stall is stopped at 10 s,
    where it takes under a second uncapped."""
    with pytest.raises((RuntimeError, subprocess.TimeoutExpired)):
        scale.run_child("whole", parquet, 1000, limit_mb=LIMIT_MB, timeout=10)


def test_the_cap_is_real(scale, parquet):
    """Twin: the same child asking for LIMIT_MB + 16 MB under the same cap fails."""
    with pytest.raises(RuntimeError, match="MemoryError"):
        scale.run_child("allocate", parquet, 1000, limit_mb=LIMIT_MB)
