"""Run hw4's required runs on Modal: one H100 per run, detached, logs and checkpoints on a volume.

    pip install -e '.[hf,modal]' && modal setup          # once: the modal client and your token
    modal run --detach lib/llmrl/hw4/modal_app.py --run format_copy-grpo
    modal run --detach lib/llmrl/hw4/modal_app.py --run all             # the four, in parallel
    modal run lib/llmrl/hw4/modal_app.py --bundle                      # zip the logs to ./hw4_runs.zip

``--detach`` keeps the run going when the terminal closes. Each run writes
``/runs/<run>-seed<S>/`` on the volume ``llmrl-hw4-runs`` (metrics.jsonl, generations.jsonl, config,
the adapter checkpoint); rerunning the same command resumes from the last checkpoint there. The
Hugging Face cache also lives on the volume, so the model is downloaded once.

Options of the entrypoint: ``--run`` (a name of :data:`REQUIRED_RUNS` or ``all``), ``--seed``,
``--model`` (default Qwen2.5-Math-1.5B-Instruct), ``--vllm`` (vLLM rollouts), ``--impl`` (your
notebook, a path under the repository, instead of the reference functions), ``--wandb`` (online
WandB logging: launch with ``LLMRL_MODAL_WANDB=1`` in the environment so the functions get the Modal
secret named ``wandb`` holding WANDB_API_KEY), ``--fresh``, ``--bundle``.

``modal`` is optional: without it this module still imports, and :func:`train_argv` (the exact
command lines a run executes) works, which is what the offline tests check.
"""

from __future__ import annotations

import io
import os
import subprocess
import threading
import zipfile
from pathlib import Path

try:
    import modal
except ImportError:  # the modal extra is optional; command lines still work without it
    modal = None

APP_NAME = "llmrl-hw4"
VOLUME_NAME = "llmrl-hw4-runs"
RUNS_MOUNT = "/runs"
REMOTE_ROOT = "/root/course"
GPU = "H100"
GPU_MODEL = "Qwen/Qwen2.5-Math-1.5B-Instruct"
TIMEOUT_S = 8 * 3600          # math_hard with GRPO takes about five H100 hours
COMMIT_EVERY_S = 300          # flush the volume this often while a run goes on

# The published sampling and the system prompt that tells an instruct model the format_copy format.
SAMPLING = ["--set", "temperature=0.8", "--set", "top_p=0.95"]
FORMAT_COPY_SYSTEM = "Answer with the integer inside <answer></answer> tags and nothing else."

# The four required runs, on the published settings for a 1.5B model with LoRA: format_copy 51 steps
# of 8 x 6 rollouts at lr 3e-5; math_hard 8 x 8 rollouts at lr 3e-5, 201 steps (GR-REINFORCE) and
# 501 (GRPO) -- the trainer's math_hard defaults already hold those.
REQUIRED_RUNS = {
    "format_copy-grpo": ["--task", "format_copy", "--algo", "grpo", "--steps", "51", "--set", "lr=3e-5",
                         "--set", "n_prompts=8", "--set", "group_size=6",
                         "--backend-arg", f"system_prompt={FORMAT_COPY_SYSTEM}"],
    "format_copy-reinforce": ["--task", "format_copy", "--algo", "reinforce", "--steps", "51", "--set", "lr=3e-5",
                              "--set", "n_prompts=8", "--set", "group_size=6",
                              "--backend-arg", f"system_prompt={FORMAT_COPY_SYSTEM}"],
    "math_hard-grpo": ["--task", "math_hard", "--algo", "grpo", "--steps", "501"],
    "math_hard-reinforce": ["--task", "math_hard", "--algo", "reinforce", "--steps", "201"],
}

# What the image installs (the hf extra; torch from PyPI's default CUDA build on Linux).
IMAGE_PACKAGES = ["torch==2.13.0", "numpy==2.4.6", "tqdm==4.70.1", "matplotlib==3.11.2",
                  "transformers==5.23.0", "peft==0.21.2", "accelerate==1.15.0", "datasets==5.2.0",
                  "math-verify==0.9.0", "jupytext==1.19.6", "nbformat==5.11.1", "wandb"]
VLLM_PACKAGES = ["vllm==0.33.0"]


def run_dir(run: str, seed: int = 0) -> str:
    return f"{RUNS_MOUNT}/{run}-seed{seed}"


def train_argv(run: str, seed: int = 0, model: str = GPU_MODEL, vllm: bool = False, impl: str = "reference",
               wandb: bool = False, fresh: bool = False) -> list[str]:
    """The command line that runs the required run ``run`` inside the container."""
    if run not in REQUIRED_RUNS:
        raise ValueError(f"run must be one of {sorted(REQUIRED_RUNS)}, got {run!r}")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if not isinstance(model, str) or not model:
        raise ValueError(f"model must be a non-empty string, got {model!r}")
    argv = ["python", "-m", "llmrl.hw4", "train", *REQUIRED_RUNS[run],
            "--backend", "hf", "--model", model, *SAMPLING, "--seed", str(seed), "--run-dir", run_dir(run, seed),
            "--impl", impl, "--no-progress"]
    if vllm:
        argv += ["--backend-arg", "use_vllm=true"]
    if wandb:
        argv += ["--wandb", "--wandb-mode", "online"]
    if fresh:
        argv.append("--fresh")
    return argv


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def _commit_loop(volume, stop: threading.Event) -> None:  # pragma: no cover - runs on Modal
    while not stop.wait(COMMIT_EVERY_S):
        try:
            volume.commit()
        except Exception as e:  # noqa: BLE001 - a failed flush must not kill the run
            print(f"volume commit failed: {e}", flush=True)


if modal is not None:
    root = _repo_root()
    volume = modal.Volume.from_name(VOLUME_NAME, create_if_missing=True)
    image = (modal.Image.debian_slim(python_version="3.11")
             .pip_install(*IMAGE_PACKAGES)
             .env({"PYTHONPATH": f"{REMOTE_ROOT}/lib", "HF_HOME": f"{RUNS_MOUNT}/hf-cache",
                   "LLMRL_CACHE": f"{RUNS_MOUNT}/llmrl-cache", "TOKENIZERS_PARALLELISM": "false"})
             .add_local_dir(root / "lib" / "llmrl", f"{REMOTE_ROOT}/lib/llmrl",
                            ignore=["**/__pycache__", "**/*.pyc"])
             .add_local_dir(root / "notebooks" / "hw4", f"{REMOTE_ROOT}/notebooks/hw4",
                            ignore=["**/.ipynb_checkpoints"]))
    vllm_image = image.pip_install(*VLLM_PACKAGES)
    app = modal.App(APP_NAME)
    FUNCTION_OPTIONS = _fn_kw = dict(gpu=GPU, volumes={RUNS_MOUNT: volume}, timeout=TIMEOUT_S,
                  secrets=[modal.Secret.from_name("wandb", required_keys=["WANDB_API_KEY"])]
                  if os.environ.get("LLMRL_MODAL_WANDB") == "1" else [])

    def _run(argv: list[str]) -> int:  # pragma: no cover - runs on Modal
        volume.reload()
        stop = threading.Event()
        threading.Thread(target=_commit_loop, args=(volume, stop), daemon=True).start()
        print("running:", " ".join(argv), flush=True)
        try:
            rc = subprocess.call(argv, cwd=REMOTE_ROOT)
        finally:
            stop.set()
            volume.commit()
        return rc

    @app.function(image=image, **_fn_kw)
    def train_remote(argv: list[str]) -> int:  # pragma: no cover - runs on Modal
        return _run(argv)

    @app.function(image=vllm_image, **_fn_kw)
    def train_remote_vllm(argv: list[str]) -> int:  # pragma: no cover - runs on Modal
        return _run(argv)

    @app.function(image=image, volumes={RUNS_MOUNT: volume}, timeout=600)
    def bundle_remote() -> bytes:  # pragma: no cover - runs on Modal
        """Every run's logs and config (not the checkpoints or caches) as one zip."""
        volume.reload()
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(Path(RUNS_MOUNT).glob("*-seed*/*")):
                if path.is_file() and path.suffix in (".jsonl", ".json", ".png"):
                    z.write(path, path.relative_to(RUNS_MOUNT))
        return buf.getvalue()

    @app.local_entrypoint()
    def main(run: str = "format_copy-grpo", seed: int = 0, model: str = GPU_MODEL, vllm: bool = False,
             impl: str = "reference", wandb: bool = False, fresh: bool = False, bundle: bool = False):  # pragma: no cover
        if bundle:
            data = bundle_remote.remote()
            Path("hw4_runs.zip").write_bytes(data)
            print(f"wrote hw4_runs.zip ({len(data):,} bytes)")
            return
        runs = sorted(REQUIRED_RUNS) if run == "all" else [run]
        fn = train_remote_vllm if vllm else train_remote
        calls = [(r, fn.spawn(train_argv(r, seed, model, vllm, impl, wandb, fresh))) for r in runs]
        for r, call in calls:
            print(f"{r}: {call.object_id} -> volume {VOLUME_NAME}:{run_dir(r, seed)}")
        for r, call in calls:
            print(f"{r}: exit code {call.get()}")
else:
    app = None
