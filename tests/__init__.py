"""Tests, mirroring the packages (tests/training, tests/service) plus the shipping checks (tests/test_ship_*)."""
