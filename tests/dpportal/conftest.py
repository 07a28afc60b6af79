"""Fixtures for the portal's tests (the shared people and data are in tests/conftest.py)."""

import pytest


@pytest.fixture
def dataset(small_dataset):
    """The owner's dataset unless a module says otherwise: the 2,000-row Adult sample."""
    return small_dataset
