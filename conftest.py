"""Root conftest: the project's own tests drive the plugin through pytester."""

pytest_plugins = ["pytester"]
