"""What pyproject.toml cannot say: the top-level ``themes/`` ships inside the wheel as the
package data of ``infertop.themes``, so a user's ``pip install`` has the themes the project keeps
at its top level (without them, ``t`` raised InvalidThemeError)."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["infertop", "infertop.*"]), "infertop.themes"],
    package_dir={"infertop.themes": "themes"},
    package_data={"infertop.themes": ["*.yaml"]},
)
