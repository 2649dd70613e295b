"""Tasks: KernelBench-format module tasks, the built-in suite, hgemm suites, and task hygiene.

`hygiene` is not imported here: it needs torch, and listing tasks must stay cheap.
"""

from rl_kernels.tasks.module import TaskError, TaskProgram, load_module_task, load_task_program
from rl_kernels.tasks.suites import SkippedFile, get_task, list_suites, load_suite, scan_task_dir

__all__ = [
    "SkippedFile",
    "TaskError",
    "TaskProgram",
    "get_task",
    "list_suites",
    "load_module_task",
    "load_suite",
    "load_task_program",
    "scan_task_dir",
]
