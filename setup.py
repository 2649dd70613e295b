"""Packaging beside pyproject.toml: the checkout's top-level `actors/`, `learner/` and `cluster/`
folders install as `rl_kernels.actors`, `rl_kernels.learner` and `rl_kernels.cluster`, so a shared
site-packages gets no generic top-level names that other distributions may also use.  (pyproject
can map a folder to a package name but cannot add the mapped packages to what `find` discovers.)"""

from setuptools import find_packages, setup

MAPPED = {"rl_kernels.actors": "actors", "rl_kernels.learner": "learner", "rl_kernels.cluster": "cluster"}

setup(packages=find_packages(include=["rl_kernels", "rl_kernels.*"]) + list(MAPPED), package_dir=MAPPED)
