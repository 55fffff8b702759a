"""``python -m llmrl.hw4`` for the data-parallel tests: one more task, and a crash on demand.

* ``--task letters``: a random-weight model's completions never hold format_copy's tags, so every
  reward is 0 and no gradient flows; ``letters`` (llmrl.hw4.gpu_check.BenchTask: the share of the
  letters a-m in a completion) gives rewards that vary within a group.
* ``LLMRL_TEST_KILL_AT_STEP=k``: the first process sends SIGKILL to the launcher and every worker
  (itself last) right after step k's metrics are logged and before its checkpoint is written: a
  crash at a known point, with a log line past the last checkpoint.

    torchrun --nproc_per_node 2 lib/tests/hw4_dp_driver.py train --task letters --algo grpo --backend hf ...
"""

import os
import signal
import sys

from llmrl.hw4 import run_manager
from llmrl.hw4.__main__ import main
from llmrl.hw4.gpu_check import BenchTask
from llmrl.hw4.tasks import register_task

register_task("letters", lambda **kw: BenchTask(prompt_tokens=6, new_tokens=8, **kw))

KILL_AT = os.environ.get("LLMRL_TEST_KILL_AT_STEP")
if KILL_AT is not None:
    _train = run_manager.train

    def train(*args, **kwargs):
        def crash(record):
            if record["step"] == int(KILL_AT) and os.environ.get("RANK", "0") == "0":
                import psutil  # accelerate's dependency
                launcher = psutil.Process(os.getppid())
                for proc in [launcher] + [c for c in launcher.children(recursive=True) if c.pid != os.getpid()]:
                    proc.send_signal(signal.SIGKILL)
                os.kill(os.getpid(), signal.SIGKILL)
        return _train(*args, callback=crash, **kwargs)

    run_manager.train = train  # main() imports it when it runs

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
