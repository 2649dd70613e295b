"""Packaging beside pyproject.toml: the checkout's top-level `actors/`, `learner/` and `cluster/`
folders install as `rl_kernels.actors`, `rl_kernels.learner` and `rl_kernels.cluster`, so a shared
site-packages gets no generic top-level names that other distributions may also use.  (pyproject
can map a folder to a package name but cannot add the mapped packages to what `find` discovers.)
The data folders under rl_kernels/ (the built-in tasks, the native shim headers) are found as
namespace packages, so setuptools installs them as the package data they are instead of warning, at
every install, that it would ignore an importable package."""

from setuptools import find_namespace_packages, setup

MAPPED = {"rl_kernels.actors": "actors", "rl_kernels.learner": "learner", "rl_kernels.cluster": "cluster"}

setup(packages=find_namespace_packages(include=["rl_kernels", "rl_kernels.*"], exclude=["*.__pycache__"]) + list(MAPPED),
      package_dir=MAPPED)
