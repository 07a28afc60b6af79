"""Fixtures for the portal's tests (the shared people and data are in tests/conftest.py)."""

import pytest

import mechanisms


@pytest.fixture
def dataset(small_dataset):
    """The owner's dataset unless a module says otherwise: the 2,000-row Adult sample."""
    return small_dataset


@pytest.fixture
def sleep_mechanism():
    """The test-only "test_sleep" mechanism in this process's catalogue, for one test.

    For tests that submit it to a real worker (`tests.dpportal.worker_app`); removed after, so
    that no other test sees it (the catalogue is module state, shared by every test of a
    pytest-xdist worker).
    """
    from tests.dpportal.worker_app import TEST_SLEEP

    assert TEST_SLEEP.name not in mechanisms.CATALOGUE
    mechanisms.CATALOGUE[TEST_SLEEP.name] = TEST_SLEEP
    try:
        yield TEST_SLEEP
    finally:
        del mechanisms.CATALOGUE[TEST_SLEEP.name]
