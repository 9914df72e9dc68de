"""The package list for `pip install .` (everything else is in pyproject.toml): analysis and ui as found, plus the
dashboard's shell (app.py, pages/) as ui.shell and the bundled samples as sample_models, which have no __init__.py."""
from setuptools import find_packages, setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    """ui.shell is the checkout's top folder: of its modules only app.py is the dashboard's (not this file)."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if package != "ui.shell" or m[1] == "app"]


setup(packages=find_packages(include=["analysis", "analysis.*", "ui", "ui.*"])
      + ["ui.shell", "ui.shell.pages", "sample_models"],
      cmdclass={"build_py": BuildPy})
