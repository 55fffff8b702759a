"""The hub's tests (a package: they import each other as hub.tests.*)."""
