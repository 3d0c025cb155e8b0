"""The suite runs on the embedded simulator unless NEURON_VFIO_DEVICE names a device; every
test starts and ends with the runtime closed (nrtpy.reset())."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("NEURON_VFIO_DEVICE", "sim")

import nrtpy  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@pytest.fixture(autouse=True)
def fresh_runtime(monkeypatch):
    nrtpy.reset()
    yield
    nrtpy.reset()


@pytest.fixture
def examples():
    return EXAMPLES


@pytest.fixture
def repo():
    return REPO
