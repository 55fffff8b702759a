"""hw4's trainer data-parallel (llmrl.rl.data_parallel): shares of every batch, the gradient all-reduce
before clipping, rank-0 files, resume, and the equivalence of a 2-process run with a 1-process run.

The fast tests check the pieces in one process. The slow ones start real processes on this machine
(gloo on 2 CPU processes, ports 8760-8764; ``LLMRL_TEST_DP_PORT=P`` moves them to P..P+4, for a run
beside another one):

* the character model under ``accelerate launch --config_file configs/accelerate/ddp.yaml`` and the
  hf backend's tiny random Qwen2 under ``torchrun``, each against the 1-process run of the same
  configuration (``shares=2``: the same prompts and samples). In float64 the parameters agree to
  1e-10 (measured: about 1e-14). Why not float32: AdamW divides each gradient element by its own
  root-mean-square, so an element whose gradient is near Adam's eps (1e-8) turns a rounding
  difference of the gradient (a sum of two half-batch gradients against one backward pass) into an
  update difference of a few percent of the learning rate: in float32 the character model's
  parameters after one step agreed to 1.4e-6 (lr 5e-5; 1,650 of 110,592 elements not bit-equal).
  In float64 the same amplification leaves at most lr * 1e-16 / (4 * 1e-8), about 1e-13 per step;
* both processes free their process group in ``shutdown`` (no gloo thread left to be torn down at
  interpreter exit, where it could abort a finished run);
* a 2-process run killed (SIGKILL) after a checkpoint and restarted: the same parameters and
  metrics, bit for bit, as the uninterrupted run.

Times on the 2-core machine shared with other jobs: fast tests 9 s, slow tests 93 s (load average
6; each 2-process launch is 15-30 s of it, mostly interpreter start and imports); 210 s at load
13-17 (2026-12-01).
"""

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from llmrl.rl import data_parallel as dp
from llmrl.rl.data_parallel import Group, Shares
from llmrl.hw4 import charlm
from llmrl.hw4.char_backend import CharBackend
from llmrl.hw4.impl import load_impl
from llmrl.hw4.tasks import Example, FormatCopyTask
from llmrl.hw4.settings import HW4Config, default_config
from llmrl.hw4.run_manager import data_parallel_config, read_jsonl, train
from llmrl.losses import LossBatch, clip_stats
from llmrl.sampling import Rollout
from llmrl.rl.step import minibatches

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def impl():
    return load_impl("reference")


def rank(r, w=2):
    """A process's place without a process group (the pieces below need no collectives)."""
    return Group(rank=r, world_size=w)


# ----------------------------------------------------------------------------- configuration

def test_shares_setting_and_launch_checks(monkeypatch):
    # the 1-process layout keeps today's keys: runs made before `shares` existed still resume
    assert default_config("format_copy", "grpo").key() == "058353d063aa222a"
    assert default_config("math_hard", "reinforce").key() == "430b40030c24ef5f"
    assert default_config("format_copy", "grpo", shares=2).key() != default_config("format_copy", "grpo").key()
    with pytest.raises(ValueError, match="multiple of shares"):
        default_config("format_copy", "grpo", n_prompts=6, shares=4)
    with pytest.raises(ValueError, match="minibatch_size=6 must be a multiple of shares=4"):
        default_config("format_copy", "grpo", n_prompts=8, minibatch_size=6, shares=4)
    default_config("format_copy", "grpo", n_prompts=4, group_size=6, minibatch_size=30, shares=4)  # one minibatch
    with pytest.raises(TypeError):
        HW4Config(shares=2.0)
    cfg = default_config("format_copy", "grpo")
    assert data_parallel_config(cfg, dp.SINGLE) is cfg
    assert data_parallel_config(cfg, rank(1)).shares == 2          # one share per process
    assert data_parallel_config(replace(cfg, shares=4), rank(0)).shares == 4
    with pytest.raises(ValueError, match="shares=2 cannot be split over 4 processes"):
        data_parallel_config(replace(cfg, shares=2), rank(0, 4))
    with pytest.raises(ValueError, match="on 3 processes each process holds one share.*n_prompts=8 must be a multiple"):
        data_parallel_config(cfg, rank(0, 3))
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(ValueError, match="DeepSpeed is for train-trl"):
        data_parallel_config(cfg, rank(0))
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED")
    with pytest.raises(ValueError, match="use a multiple of 2"):
        Shares(3, rank(0))


def test_where_launchers_put_a_process(monkeypatch):
    for names in dp.LAUNCH_ENV.values():
        for n in names:
            monkeypatch.delenv(n, raising=False)
    for k in ("MASTER_ADDR", "MASTER_PORT", "ACCELERATE_USE_CPU"):
        monkeypatch.delenv(k, raising=False)
    assert dp.launch_env() == {"world_size": 1, "rank": 0, "local_rank": 0}
    assert dp.process_group() is dp.SINGLE                        # no launcher: the 1-process run
    # Open MPI, as accelerate launch's MULTI_CPU launcher runs it (mpirun with --mpirun_hostfile)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    assert dp.launch_env() == {"world_size": 2, "rank": 1, "local_rank": 1}
    with pytest.raises(RuntimeError, match=r"\['MASTER_ADDR', 'MASTER_PORT'\] are not"):
        dp.process_group()
    for n in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"):
        monkeypatch.delenv(n)
    monkeypatch.setenv("WORLD_SIZE", "2")                         # torchrun's variables, RANK missing
    with pytest.raises(RuntimeError, match="torchrun --nproc_per_node 2"):
        dp.process_group()
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE must be an integer"):
        dp.launch_env()
    monkeypatch.delenv("WORLD_SIZE")
    # accelerate launch --cpu --num_processes 2 (or MULTI_CPU without a hostfile) starts ONE process
    # and sets the rendezvous: stop rather than train alone
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    with pytest.raises(RuntimeError, match="started one.*mpirun"):
        dp.process_group()
    pytest.importorskip("accelerate", reason="the hf extra is not installed (pip install -e '.[hf]')")
    from accelerate.commands.config.config_args import load_config_from_file

    mpi = load_config_from_file(str(ROOT / "configs" / "accelerate" / "multi_cpu.yaml"))
    assert mpi.distributed_type == "MULTI_CPU" and mpi.num_processes == 2


def test_train_command_prints_the_seconds_the_benchmark_reads(capsys, tmp_path):
    """``python -m llmrl.tools.bench --only-dp`` reads the training seconds and each process's CPU
    seconds from the train command's last line (one process here: one CPU figure)."""
    from llmrl.tools.bench import train_timing
    from llmrl.hw4.__main__ import main

    assert main(["train", "--task", "format_copy", "--algo", "grpo", "--steps", "1", "--run-dir", str(tmp_path),
                 "--no-progress", "--set", "n_prompts=2", "--set", "group_size=2", "--set", "minibatch_size=4",
                 "--set", "eval_limit=2"]) == 0
    out = capsys.readouterr().out
    seconds, cpus = train_timing(out)
    assert len(cpus) == 1 and 0 < cpus[0] and 0 < seconds
    with pytest.raises(ValueError, match="no timing line"):
        train_timing(out.replace("steps in", "steps:"))


# ----------------------------------------------------------------------------- collect: prompts and samples

def test_each_process_draws_its_share_of_the_one_process_stream():
    task = FormatCopyTask()
    whole = task.sample(8, torch.Generator().manual_seed(3))
    parts = [dp.ShareTask(task, Shares(2, rank(r))).sample(4, torch.Generator().manual_seed(3)) for r in (0, 1)]
    assert parts[0] + parts[1] == whole                     # a split of the same draw, in rank order
    four = [dp.ShareTask(task, Shares(4, rank(r))).sample(4, torch.Generator().manual_seed(3)) for r in (0, 1)]
    assert four == parts                                    # two shares per process: the same split
    assert dp.ShareTask(task, Shares(2)).sample(8, torch.Generator().manual_seed(3)) == whole  # one process
    assert dp.ShareTask(task, Shares(2)).eval_examples() == task.eval_examples()             # the rest is the task's


class RecordingBackend:
    """Samples like HFBackend: one draw from the generator seeds the completions (a share's rollout
    is a function of its prompts and its stream only)."""

    pad_token_id = 0

    def __init__(self):
        self.calls = []

    def generate(self, prompts, group_size, max_new_tokens, temperature, top_p, generator):
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
        self.calls.append((list(prompts), seed))
        B, P = len(prompts) * group_size, 2 + len(prompts[0])
        R = 1 + seed % 3                                    # completions of different widths per share
        ids = torch.full((B, P + R), seed % 97 + 1)
        return Rollout(input_ids=ids, attention_mask=torch.ones_like(ids), prompt_len=P,
                       completions=[str(seed)] * B, group_size=group_size,
                       prompts=[p for p in prompts for _ in range(group_size)])


def test_each_share_is_sampled_with_its_own_stream_whatever_the_process():
    prompts = ["a", "b", "c", "d"]
    one = RecordingBackend()
    g1 = torch.Generator().manual_seed(7)
    twin = dp.ShareSampler(one, Shares(2)).generate(prompts, 2, 4, 1.0, 1.0, g1)
    per_rank, states = [], []
    for r in (0, 1):
        b = RecordingBackend()
        g = torch.Generator().manual_seed(7)
        dp.ShareSampler(b, Shares(2, rank(r))).generate(prompts[2 * r:2 * r + 2], 2, 4, 1.0, 1.0, g)
        per_rank += b.calls
        states.append(g.get_state())
    assert one.calls == per_rank and one.calls[0][0] == ["a", "b"] and one.calls[1][0] == ["c", "d"]
    assert one.calls[0][1] != one.calls[1][1]               # the two shares are not sampled alike
    # the run's stream advances by one draw in every process (as HFBackend.generate's own draw):
    # the prompts of later steps are the same in every process and in a 1-process run
    ref = torch.Generator().manual_seed(7)
    torch.randint(0, 2**31 - 1, (1,), generator=ref)
    assert all(torch.equal(s, ref.get_state()) for s in states + [g1.get_state()])
    assert len(twin) == 8 and twin.prompts == [p for p in prompts for _ in range(2)]


def tiny_char_backend(dtype=torch.float64):
    from llmrl.tinylm import TinyLM
    torch.manual_seed(0)
    model = TinyLM(vocab_size=charlm.VOCAB_SIZE, d=32, n_layers=1, n_heads=2, max_len=charlm.MAX_LEN)
    return CharBackend(model, dtype=dtype)


def _real_logprobs(backend, rollout):
    lp = torch.log_softmax(backend.logits(rollout.input_ids, rollout.attention_mask), -1)
    lp = lp[:, :-1].gather(-1, rollout.input_ids[:, 1:, None]).squeeze(-1)
    att = rollout.attention_mask.bool()
    mask = att[:, 1:] & att[:, :-1]  # real tokens scored from a real context
    return [row[m] for row, m in zip(lp, mask)]


def test_concatenated_share_rollouts_score_as_the_shares(impl):
    """The 1-process run scores its shares in one padded batch; a process scores its share alone."""
    backend = tiny_char_backend()
    a = backend.generate(["12", "-345"], 2, 8, 1.0, 1.0, torch.Generator().manual_seed(1))
    b = backend.generate(["7", "88"], 2, 12, 1.0, 1.0, torch.Generator().manual_seed(2))
    both = dp.concat_rollouts([a, b], backend.pad_token_id)
    R = max(x.input_ids.shape[1] - x.prompt_len for x in (a, b))
    assert both.input_ids.shape == (8, both.prompt_len + R) and both.completions == a.completions + b.completions
    assert torch.equal(both.completion_mask[:4, :a.completion_mask.shape[1]], a.completion_mask)
    assert not both.completion_mask[:4, a.completion_mask.shape[1]:].any()
    for whole, part in zip(_real_logprobs(backend, both), _real_logprobs(backend, a) + _real_logprobs(backend, b)):
        assert torch.allclose(whole, part, rtol=0, atol=1e-12)
    mask = impl.build_completion_mask(both.attention_mask, both.prompt_len)
    assert mask.sum() == a.completion_mask.sum() + b.completion_mask.sum()


def test_concatenated_hf_rollouts_keep_positions(impl):
    """HF prompts of different lengths: a share padded further to the left scores the same."""
    pytest.importorskip("peft", reason="the hf extra is not installed (pip install -e '.[hf]')")
    from llmrl.hw4.hf_backend import HFBackend, char_tokenizer, tiny_random_model

    tok = char_tokenizer()
    torch.manual_seed(0)
    hf = HFBackend(tiny_random_model(tok), tok, device="cpu", dtype=torch.float64, logits_dtype=torch.float64,
                   lora_dropout=0.0, progress=False)
    a = hf.generate(["short"], 2, 5, 1.0, 1.0, torch.Generator().manual_seed(1))
    b = hf.generate(["a much longer prompt"], 2, 9, 1.0, 1.0, torch.Generator().manual_seed(2))
    both = dp.concat_rollouts([a, b], hf.pad_token_id)
    assert both.prompt_len == b.prompt_len > a.prompt_len
    for whole, part in zip(_real_logprobs(hf, both), _real_logprobs(hf, a) + _real_logprobs(hf, b)):
        assert torch.allclose(whole, part, rtol=0, atol=1e-10)


# ----------------------------------------------------------------------------- update: minibatches, loss

def test_minibatches_of_shares():
    B, mb = 16, 8
    fields = {"id": torch.arange(B), "x": torch.arange(B * 3.0).view(B, 3)}
    g = torch.Generator().manual_seed(5)
    twin = dp.share_minibatches(minibatches, Shares(2), mb)(fields, g)
    ref = torch.Generator().manual_seed(5)
    torch.randperm(B, generator=ref)       # the 1-process run's draw per epoch, whatever the shares
    assert torch.equal(g.get_state(), ref.get_state())
    assert [len(m["id"]) for m in twin] == [8, 8]
    for m in twin:                          # minibatch_size / shares rows of each share, share by share
        assert (m["id"][:4] < 8).all() and (m["id"][4:] >= 8).all()
        assert torch.equal(m["x"][:, 0], m["id"] * 3.0)
    assert sorted(torch.cat([m["id"] for m in twin]).tolist()) == list(range(B))
    for r in (0, 1):                        # a process holds one share: its rows of the same minibatches
        mine = {k: v[8 * r:8 * r + 8] for k, v in fields.items()}
        got = dp.share_minibatches(minibatches, Shares(2, rank(r)), mb)(mine, torch.Generator().manual_seed(5))
        assert [m["id"].tolist() for m in got] == [m["id"][4 * r:4 * r + 4].tolist() for m in twin]
    whole = dp.share_minibatches(minibatches, Shares(2), 64)(fields, torch.Generator().manual_seed(5))
    assert len(whole) == 1 and len(whole[0]["id"]) == B     # a minibatch larger than the batch: one step

    def drops_a_row(f, size, generator):
        yield {k: v[1:] for k, v in f.items()}
    with pytest.raises(ValueError, match="every row exactly once"):
        dp.share_minibatches(drops_a_row, Shares(2), mb)(fields, g)


def _loss_batch(rows=8, cols=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    lp = torch.randn(rows, cols, generator=g).double().requires_grad_()
    old = lp.detach() + 0.3 * torch.randn(rows, cols, generator=g).double()
    lengths = torch.tensor([5, 5, 4, 5, 1, 2, 1, 3])[:rows]  # more tokens in the first half than in the second
    mask = torch.arange(cols)[None, :] < lengths[:, None]
    adv = torch.randn(rows, generator=g)
    return LossBatch(logprobs=lp, logits=torch.randn(rows, cols, 3, generator=g), old_logprobs=old, mask=mask,
                     advantages=adv, rewards=adv, ref_logprobs=old - 0.1)


def test_the_loss_of_a_minibatch_is_the_mean_of_its_shares(impl):
    b = _loss_batch()
    kl = lambda x: impl.approx_kl_from_logprobs(x.logprobs, x.ref_logprobs, x.mask)  # noqa: E731

    def student(x):  # a token-mean KL term: not a mean over rows, so the split matters
        return impl.grpo_loss(x.logprobs, x.old_logprobs, x.ref_logprobs, x.mask, x.advantages, 0.2, 0.1), \
            {"kl": float(kl(x).detach())}
    value, stats = dp.share_loss(student, 2, clip_statistics=True)(b)
    halves = [replace(b, **{f: getattr(b, f)[s] for f in ("logprobs", "logits", "old_logprobs", "mask",
                                                             "advantages", "rewards", "ref_logprobs")})
              for s in (slice(0, 4), slice(4, 8))]
    want = [student(h) for h in halves]
    assert torch.allclose(value, (want[0][0] + want[1][0]) / 2, rtol=0, atol=1e-15)
    assert not torch.allclose(value, student(b)[0], rtol=0, atol=1e-6)  # differs from the whole minibatch's
    assert stats["kl"] == pytest.approx((want[0][1]["kl"] + want[1][1]["kl"]) / 2, abs=1e-15)
    cs = [clip_stats((h.logprobs.detach() - h.old_logprobs).exp(), h.advantages[:, None].expand_as(h.logprobs),
                     h.mask, h.old_logprobs, 0.2, 0.2, 0.5) for h in halves]
    assert stats["clip_fraction"] == pytest.approx((cs[0]["clip_fraction"] + cs[1]["clip_fraction"]) / 2)
    assert dp.share_loss(student, 1, clip_statistics=True) is student


# ----------------------------------------------------------------------------- metrics

def test_records_reduce_to_the_whole_batch():
    r = [torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64), torch.tensor([0.0, 0.0, 2.0, 0.5], dtype=torch.float64)]
    tokens, entropy = [3.0, 5.0], [0.2, 0.6]
    recs = [{"step": 4, "reward_mean": float(x.mean()), "reward_std": float(x.std(unbiased=False)),
             "completion_tokens_mean": t, "entropy_token_mean_nats": e, "grad_norm_mean": 0.7,
             "clip_low_of_negative": None if i == 0 else 0.25, "frac_zero_std_groups": float(i),
             "eval_exact_match": 0.5, "step_seconds": 1.0 + i, "note": "x"}
            for i, (x, t, e) in enumerate(zip(r, tokens, entropy))]
    out = dp.reduce_records(recs)
    whole = torch.cat(r)
    assert out["step"] == 4 and out["reward_mean"] == pytest.approx(float(whole.mean()))
    assert out["reward_std"] == pytest.approx(float(whole.std(unbiased=False)), abs=1e-12)
    assert out["entropy_token_mean_nats"] == pytest.approx((0.2 * 3 + 0.6 * 5) / 8)  # per token, not per process
    assert out["completion_tokens_mean"] == 4.0 and out["frac_zero_std_groups"] == 0.5
    assert out["clip_low_of_negative"] == 0.25            # undefined in one process: the others' value
    assert out["grad_norm_mean"] == 0.7 and out["eval_exact_match"] == 0.5 and out["note"] == "x"
    assert out["step_seconds"] == 2.0                     # the slowest process
    assert dp.reduce_records(recs[:1]) == recs[0]


# ----------------------------------------------------------------------------- real processes

def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "lib"),
            "TOKENIZERS_PARALLELISM": "false"}


def _launch(cmd, cwd, timeout=600):
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if proc.returncode:
        (Path(cwd) / "launch.log").write_text(proc.stdout + "\n----- stderr\n" + proc.stderr)
        lines = [ln for ln in proc.stderr.splitlines() if "Error" in ln or "error" in ln or "what()" in ln]
        pytest.fail(f"{' '.join(cmd[:6])} ... exited with {proc.returncode}; log in {Path(cwd) / 'launch.log'}:\n"
                    + "\n".join(lines[-15:] or proc.stderr.splitlines()[-30:]))
    return proc


PORT = int(os.environ.get("LLMRL_TEST_DP_PORT", "8760"))  # the first of the 5 ports the launches use


def _torchrun(port, *args):
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port), *args]


@pytest.mark.slow
def test_gradients_are_averaged_before_clipping_on_two_processes(tmp_path):
    """Two gloo processes with different gradients: both step with the clip of the MEAN gradient."""
    script = tmp_path / "opt.py"
    script.write_text('''
import json, sys, torch
from llmrl.rl import data_parallel as dp
from llmrl.rl.step import PolicyOptimizer
group = dp.process_group()
grads = [torch.tensor([3.0, 0.0, -1.0], dtype=torch.float64), torch.tensor([1.0, 4.0, 1.0], dtype=torch.float64)]
p = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
opt = dp.DataParallelOptimizer(PolicyOptimizer([p], lr=0.1), group)
opt.zero_grad()
(p * grads[group.rank] / 2).sum().backward()     # two accumulated halves: the all-reduce happens at step()
(p * grads[group.rank] / 2).sum().backward()
norm = opt.step(1.0)
ref = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
ref_opt = PolicyOptimizer([ref], lr=0.1)
ref.grad = (grads[0] + grads[1]) / 2
ref_norm = ref_opt.step(1.0)
threads = dp.backend_threads()   # the optimizer above imported torch._dynamo, hence torch.distributed.nn
dp.shutdown()
json.dump({"p": p.tolist(), "ref": ref.tolist(), "norm": norm, "ref_norm": ref_norm,
           "local": float(grads[group.rank].norm()), "threads": threads, "threads_after": dp.backend_threads()},
          open(sys.argv[1] + f"/rank{group.rank}.json", "w"))
''')
    _launch(_torchrun(PORT + 0, str(script), str(tmp_path)), tmp_path, timeout=300)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["norm"] == pytest.approx(r["ref_norm"]) == pytest.approx(math.sqrt(2 ** 2 + 2 ** 2 + 0))
        assert r["norm"] != pytest.approx(r["local"])            # the norm of the mean, not of the local half
        assert r["p"] == pytest.approx(r["ref"], abs=1e-15)
    assert ranks[0]["p"] == ranks[1]["p"]                         # every process takes the same step
    for r in ranks:  # shutdown freed the group: gloo's threads are joined now, none is left for the exit
        assert "pt_gloo_runloop" in r["threads"] and "gloo_tcp_loop" in r["threads"], r["threads"]
        assert r["threads_after"] == [], r["threads_after"]


@pytest.mark.slow
def test_shutdown_frees_a_group_that_torch_captured_in_default_arguments(tmp_path):
    """torch.distributed.nn imported after init_process_group holds the group in 10 default
    arguments (group=group.WORLD); shutdown drops them, so the group and its gloo threads go now,
    not during interpreter exit (where a finished 2-process run sometimes aborted: SIGABRT,
    "terminate called without an active exception")."""
    script = tmp_path / "captured.py"
    script.write_text('''
import json, sys, torch.distributed as dist
from llmrl.rl import data_parallel as dp
dist.init_process_group("gloo", store=dist.FileStore(sys.argv[1] + "/store", 1), rank=0, world_size=1)
import torch.distributed.nn.functional as F   # after the group exists: its defaults hold it
held = sum(d is dist.group.WORLD for d in F.all_reduce.__defaults__)
import time
for _ in range(500):  # gloo's worker threads name themselves once they run: wait for that (at most 5 s)
    before = dp.backend_threads()
    if "pt_gloo_runloop" in before:
        break
    time.sleep(0.01)
dp.shutdown()
print(json.dumps({"held": held, "before": before, "after": dp.backend_threads(),
                  "defaults": [repr(d) for d in F.all_reduce.__defaults__]}))
''')
    proc = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", str(script), str(tmp_path)], env=_env(),
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["held"] == 1 and "pt_gloo_runloop" in out["before"], out   # the trap is really set
    assert out["after"] == [], out                                          # and shutdown got out of it
    assert out["defaults"][-1] == "None", out


# The character model, float64 (see the module docstring), a few small steps with an evaluation each.
CHAR_SETS = dict(n_prompts=4, group_size=4, minibatch_size=8, grad_accum_steps=2, eval_every=1, eval_limit=8,
                 ckpt_every=1, gen_every=1)
CHAR_STEPS = 3


def _char_cli(run_dir, steps=CHAR_STEPS):
    return ["-m", "llmrl.hw4", "train", "--task", "format_copy", "--algo", "grpo", "--steps", str(steps),
            "--run-dir", str(run_dir), "--backend-arg", "dtype=float64", "--no-progress"] + \
        [f"--set={k}={v}" for k, v in CHAR_SETS.items()]


def _params(run_dir, step):
    blob = torch.load(Path(run_dir) / f"policy-step{step:05d}.pt", weights_only=True)
    return blob["state"]


def _max_diff(a, b):
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def _records(run_dir):
    return [{k: v for k, v in r.items() if k != "step_seconds"} for r in read_jsonl(Path(run_dir) / "metrics.jsonl")]


def _assert_records_match(got, want, rel=1e-6, abs_=1e-7):
    """Step records of a 2-process and a 1-process run: the same samples, so the same rewards and
    counts; statistics to float32 rounding (the student's advantages and log-probs are float32, and a
    mean over two shares rounds differently from the mean over the batch)."""
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for g, w in zip(got, want):
        assert g.keys() == w.keys(), set(g) ^ set(w)
        for k, v in w.items():
            if v is None or g[k] is None:
                assert v is None and g[k] is None, (g["step"], k)
            else:
                assert g[k] == pytest.approx(v, rel=rel, abs=abs_), (g["step"], k, g[k], v)


@pytest.fixture(scope="module")
def char_two_processes(tmp_path_factory):
    """The character model on 2 processes, started by accelerate launch with the repository's DDP config."""
    pytest.importorskip("accelerate", reason="the hf extra is not installed (pip install -e '.[hf]')")
    run_dir = tmp_path_factory.mktemp("char2") / "run"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(ROOT / "configs" / "accelerate" / "ddp.yaml"), "--num_processes", "2",
           "--main_process_port", str(PORT + 1),
           *_char_cli(run_dir)]
    t = time.perf_counter()
    proc = _launch(cmd, run_dir.parent)
    return run_dir, proc, time.perf_counter() - t


@pytest.mark.slow
def test_two_processes_equal_one_process_on_the_character_model(char_two_processes, impl, tmp_path):
    run_dir, proc, _ = char_two_processes
    assert "2 processes (cpu): shares=2, each process samples 2 of the 4 prompts" in proc.stdout
    assert proc.stdout.count("format_copy grpo: 3 steps") == 1           # one summary: rank 0's
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["shares"] == 2 and saved["n_prompts"] == 4
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1, 2, 3]  # one writer
    gens = read_jsonl(run_dir / "generations.jsonl")
    assert [g["step"] for g in gens] == [1] * 4 + [2] * 4 + [3] * 4     # one group per step, from rank 0
    cfg = default_config("format_copy", "grpo", steps=CHAR_STEPS, shares=2, backend_kwargs={"dtype": "float64"},
                         **CHAR_SETS)
    one = train(cfg, impl, run_dir=tmp_path / "one", progress=False)
    assert one.records[1]["step"] == 1 and one.records[1]["reward_std"] > 0   # a batch with a gradient
    diff = _max_diff(_params(run_dir, CHAR_STEPS), _params(tmp_path / "one", CHAR_STEPS))
    print(f"character model, {CHAR_STEPS} steps, float64: max |2 processes - 1 process| = {diff:.2e}")
    assert diff < 1e-10
    _assert_records_match(_records(run_dir), _records(tmp_path / "one"))
    assert [g["completion"] for g in gens] == [g["completion"] for g in read_jsonl(tmp_path / "one" / "generations.jsonl")]
    # the 1-process run of before (shares=1) serves the same prompts at the first step
    train(replace(cfg, shares=1, steps=1), impl, run_dir=tmp_path / "plain", progress=False)
    assert read_jsonl(tmp_path / "plain" / "generations.jsonl")[0]["prompt"] == gens[0]["prompt"]


@pytest.mark.slow
def test_a_killed_two_process_run_resumes_exactly(char_two_processes, tmp_path):
    """SIGKILL to the launcher and both workers after step 2 is logged, before its checkpoint (the
    last one is step 1's); the same command again continues from step 1, bit for bit."""
    full_dir = char_two_processes[0]
    run_dir = tmp_path / "cut"
    driver = str(ROOT / "lib" / "tests" / "hw4_dp_driver.py")
    cmd = _torchrun(PORT + 2, driver, *_char_cli(run_dir)[2:])
    proc = subprocess.run(cmd, env={**_env(), "LLMRL_TEST_KILL_AT_STEP": "2"}, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, start_new_session=True)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1, 2]   # step 2 past the checkpoint
    assert torch.load(run_dir / "trainer_state.pt", weights_only=False)["step"] == 1
    _launch(_torchrun(PORT + 3, *_char_cli(run_dir)), tmp_path)  # the same command again: it resumes
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1, 2, 3]  # step 2 once, redone
    assert _max_diff(_params(run_dir, CHAR_STEPS), _params(full_dir, CHAR_STEPS)) == 0.0
    assert _records(run_dir) == _records(full_dir)           # bit for bit


HF_SETS = dict(n_prompts=4, group_size=4, minibatch_size=8, grad_accum_steps=1, max_new_tokens=8, eval_every=1,
               eval_limit=2, lr=1e-2, kl_coef=0.05, ckpt_every=1)
HF_BACKEND = dict(model="tiny-random", device="cpu", lora_dropout=0.0, dtype="float64", logits_dtype="float64")


@pytest.mark.slow
def test_two_processes_equal_one_process_on_a_tiny_hf_model(impl, tmp_path):
    """The hf backend (LoRA on a random Qwen2, float64, no LoRA dropout: its draws differ per process)."""
    pytest.importorskip("peft", reason="the hf extra is not installed (pip install -e '.[hf]')")
    from llmrl.hw4.gpu_check import BenchTask

    cmd = _torchrun(PORT + 4, str(ROOT / "lib" / "tests" / "hw4_dp_driver.py"), "train", "--task", "letters",
                    "--algo", "grpo", "--steps", "2", "--run-dir", str(tmp_path / "two"), "--backend", "hf",
                    "--no-progress", *[f"--backend-arg={k}={v}" for k, v in HF_BACKEND.items()],
                    *[f"--set={k}={v}" for k, v in HF_SETS.items()])
    _launch(cmd, tmp_path)
    cfg = default_config("letters", "grpo", steps=2, shares=2, backend="hf", backend_kwargs=HF_BACKEND, **HF_SETS)
    one = train(cfg, impl, run_dir=tmp_path / "one", task=BenchTask(prompt_tokens=6, new_tokens=8), progress=False)
    assert one.records[1]["grad_norm_mean"] > 0
    final = _params(tmp_path / "one", 2)
    diff = _max_diff(_params(tmp_path / "two", 2), final)
    print(f"hf tiny-random, 2 steps, float64: max |2 processes - 1 process| = {diff:.2e}")
    assert diff < 1e-10
    assert max(v.abs().max().item() for k, v in final.items() if "lora_B" in k) > 1e-3  # the adapter moved
    _assert_records_match(_records(tmp_path / "two"), _records(tmp_path / "one"))
