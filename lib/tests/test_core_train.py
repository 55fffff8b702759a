"""SFT checkpoints (cache, corruption, staleness) and the RL trainer (learning, determinism, bad input)."""

import copy

import pytest
import torch

from llmrl.sft import checkpoints as C
from llmrl import metrics
from llmrl.addition import PromptSampler, eval_problems
from llmrl.evaluation import accuracy
from llmrl.rewards import exact_match
from llmrl.tinylm import TinyLM
from llmrl.rl.run import Hooks
from llmrl.rl.config import RLConfig
from llmrl.rl.train import rl_train

TINY = C.SFTConfig(steps=30, batch_size=16, warmup=5)
TINY_SNAPS = {"early": C.Snapshot(10), "last": C.Snapshot(30)}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMRL_CACHE", str(tmp_path))
    return tmp_path


def test_checkpoint_is_cached_and_reloaded(cache, monkeypatch):
    m1, meta = C.load_checkpoint("early", TINY, TINY_SNAPS, progress=False, with_meta=True)
    assert meta["step"] == 10 and meta["source"] == "cache"  # not the course's run: trained here
    files = sorted(p.name for p in cache.glob("*.pt"))
    assert len(files) == 2  # one SFT run wrote both snapshots
    calls = []
    monkeypatch.setattr(C, "sft_train", lambda *a, **k: calls.append(1))
    m2 = C.load_checkpoint("early", TINY, TINY_SNAPS)
    assert not calls  # served from the cache
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))


def test_corrupted_checkpoint_is_rebuilt(cache):
    m1 = C.load_checkpoint("last", TINY, TINY_SNAPS, progress=False)
    for p in cache.glob("*last*.pt"):
        p.write_bytes(p.read_bytes()[:100])  # truncated file
    m2 = C.load_checkpoint("last", TINY, TINY_SNAPS, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))


def test_tampered_checkpoint_fails_its_checksum(cache):
    C.load_checkpoint("last", TINY, TINY_SNAPS, progress=False)
    path = next(cache.glob("*last*.pt"))
    blob = torch.load(path, weights_only=True)
    blob["state"] = blob["state"][:-8] + b"\x00" * 8
    torch.save(blob, path)
    key = C._key(TINY, TINY_SNAPS)
    assert C.load_state(path, key) is None  # detected, so load_checkpoint would rebuild it


def test_stale_key_is_not_loaded(cache):
    C.load_checkpoint("last", TINY, TINY_SNAPS, progress=False)
    path = next(cache.glob("*last*.pt"))
    assert C.load_state(path, "another-config") is None


def test_checkpoint_bad_name(cache):
    with pytest.raises(ValueError, match="unknown checkpoint"):
        C.load_checkpoint("professor", TINY, TINY_SNAPS)


def test_rl_config_rejects_bad_values():
    with pytest.raises(ValueError, match="group_size"):
        RLConfig(group_size=1)
    with pytest.raises(ValueError, match="eps_low"):
        RLConfig(eps_low=-0.1)
    with pytest.raises(ValueError, match="advantage"):
        RLConfig(advantage="median")
    with pytest.raises(ValueError, match="loss"):
        RLConfig(loss="ppo2")
    with pytest.raises(TypeError, match="steps"):
        RLConfig(steps=1.5)
    with pytest.raises(ValueError, match="teacher"):
        rl_train(TinyLM(), steps=1, loss="opd-full", progress=False)


def _one_digit_answers_reward(responses, answers):
    """An easy task for an untrained model: answer with exactly one character."""
    return torch.tensor([float(len(r) == 1) for r in responses])


def test_trainer_improves_reward_on_an_easy_task():
    torch.manual_seed(0)
    m = TinyLM()
    h = rl_train(m, steps=40, lr=1e-3, reward_fn=_one_digit_answers_reward, progress=False, seed=0)
    first, last = h.series("reward_mean")[:5].mean(), h.series("reward_mean")[-5:].mean()
    assert last > first + 0.3, (first, last)
    for key in h.names:
        metrics.entry(key)  # every recorded name is in the vocabulary
    for key in ("entropy_token_mean_nats", "kl_to_reference_k1_sum_nats", "clip_fraction_high", "completion_chars_mean"):
        assert key in h.names


def test_trainer_is_deterministic():
    def run():
        torch.manual_seed(123)
        m = TinyLM()
        return rl_train(m, steps=5, lr=1e-3, reward_fn=_one_digit_answers_reward, progress=False, seed=3)

    a, b = run(), run()
    assert a.series("reward_mean").tolist() == b.series("reward_mean").tolist()
    assert a.series("loss_mean").tolist() == b.series("loss_mean").tolist()


def test_trainer_runs_each_arm_and_custom_pieces():
    teacher, student = TinyLM(), TinyLM()
    for loss, src in (("opd-full", "policy"), ("opd-sampled", "policy"), ("sft", "teacher")):
        h = rl_train(copy.deepcopy(student), steps=2, loss=loss, rollout_from=src, teacher=teacher, progress=False)
        assert len(h) == 2
    seen = {}

    def adv(rewards, g):
        seen["adv"] = (rewards.shape, g)
        return rewards - rewards.mean()

    def loss_fn(batch):
        seen["loss"] = batch.logprobs.shape
        return -(batch.logprobs * batch.mask).sum() / batch.mask.sum()

    def kl_fn(rewards, lp, ref, mask, beta):
        seen["kl"] = beta
        return rewards

    rl_train(TinyLM(), steps=1, n_prompts=3, group_size=4, advantage_fn=adv, policy_loss_fn=loss_fn,
             kl_reward_fn=kl_fn, kl_coef=0.1, progress=False)
    assert seen == {"adv": (torch.Size([12]), 4), "loss": torch.Size([12, 5]), "kl": 0.1}


def test_hooks_see_the_batch_and_the_epoch_and_add_metrics():
    """after_score gets the scored batch (rollout, rewards, correctness, log-probs); after_minibatch
    gets the epoch index of each minibatch; what they return lands in the step's record. With
    minibatches of half the batch and accumulation over two, each epoch takes one optimizer step."""
    seen = {"batches": [], "epochs": []}

    def after_score(batch):
        seen["batches"].append((len(batch.rollout), batch.rewards.shape, batch.correct.dtype, batch.mask.shape,
                                batch.old_logprobs.shape, len(batch.rollout.answers)))
        return {"pad_share_small_sums": 0.25}

    def after_minibatch(epoch, stats):
        seen["epochs"].append(epoch)
        return {"late_clip_high_of_positive_rare": float(epoch)}

    h = rl_train(TinyLM(), steps=2, n_prompts=4, group_size=4, epochs=2, minibatch_size=8, grad_accum_steps=2,
                 hooks=Hooks(after_score=after_score, after_minibatch=after_minibatch), progress=False)
    assert seen["batches"] == [(16, torch.Size([16]), torch.bool, torch.Size([16, 5]), torch.Size([16, 5]), 16)] * 2
    assert seen["epochs"] == [0, 0, 1, 1] * 2
    assert h.series("pad_share_small_sums").tolist() == [0.25, 0.25]
    assert h.series("late_clip_high_of_positive_rare").tolist() == [0.5, 0.5]  # the mean over the minibatches


def test_evaluation_runs_at_step_zero_on_its_schedule_and_at_the_end():
    calls = []

    def eval_fn(model):
        calls.append(model)
        return {"greedy_accuracy": 0.5}

    m = TinyLM()
    h = rl_train(m, steps=5, n_prompts=2, group_size=2, eval_fn=eval_fn, eval_every=2, progress=False)
    assert [r["step"] for r in h if "eval_greedy_accuracy" in r] == [0, 2, 4, 5]
    assert all(c is m for c in calls) and h[0] == {"step": 0, "eval_greedy_accuracy": 0.5}


def test_bad_reward_shape_is_reported():
    with pytest.raises(ValueError, match="reward_fn"):
        rl_train(TinyLM(), steps=1, reward_fn=lambda r, a: torch.zeros(3), progress=False)


def test_an_unwritable_cache_still_gives_the_trained_model(cache, monkeypatch):
    def refuse(*_a, **_k):
        raise OSError("read-only file system")

    monkeypatch.setattr(C, "save_state", refuse)
    model, meta = C.load_checkpoint("last", TINY, TINY_SNAPS, progress=False, with_meta=True)
    assert meta["name"] == "last" and not list(cache.glob("*.pt"))
    assert isinstance(model, torch.nn.Module) and not model.training


# rl_train's numbers on a fixed seed, recorded (to 6 decimals) from the code of 2026-12-07 before its
# body was split into helpers: one seed, and two seeds stepping together (seed 2 of both must agree).
PINNED_ONE_SEED = {
    "reward_mean": [0.0625, 0.125, 0.125],
    "loss_mean": [0.027778, 0.030308, 0.034227],
    "kl_to_reference_k1_sum_nats": [0.0, 0.220694, 0.100024],
    "grad_norm_mean": [0.521342, 0.357372, 0.319715],
    "eval_weight_sum": [305.379686, 305.396347, 305.495431],
}
PINNED_SEED_5 = {
    "reward_mean": [0.0625, 0.0, 0.125],
    "loss_mean": [0.014151, -0.000947, 0.00932],
    "kl_to_reference_k1_sum_nats": [0.0, -0.118478, 0.026513],
    "grad_norm_mean": [0.452299, 0.064417, 0.310688],
    "eval_weight_sum": [305.379686, 305.02402, 305.127604],
}


def _pinned_run(**kw):
    def weight_sum(model):
        with torch.no_grad():
            return {"weight_sum": float(sum(p.double().sum() for p in model.parameters()))}

    steps = []
    torch.manual_seed(0)
    out = rl_train(TinyLM(), steps=3, n_prompts=4, group_size=4, lr=1e-3, kl_coef=0.05,
                   reward_fn=_one_digit_answers_reward, eval_fn=weight_sum, eval_every=2,
                   callback=lambda step, record, policy: steps.append(step), progress=False, **kw)
    return out, steps


def _assert_pinned(history, pinned):
    # abs 2e-6: the pins are rounded to 6 decimals. rel 1e-7: the weight sum (about 305, over the
    # float32 parameters) moves in its last bits on another CPU: 2.3e-6 (7.5e-9 relative) on an AMD
    # EPYC against the Intel machine that pinned it; one optimizer step moves it by 0.02 to 0.4, so a
    # change to the training still fails by far. These are same-code pins for refactors, not
    # portable numbers: MKL's portable path (MKL_CBWR=COMPATIBLE) moves a KL by 2.5e-6 and fails them.
    for name, want in pinned.items():
        got = [r[name] for r in history if name in r]
        assert got == pytest.approx(want, abs=2e-6, rel=1e-7), (name, got)


def test_rl_train_reproduces_its_pinned_numbers_on_one_seed():
    h, steps = _pinned_run(seed=2)
    assert [r["step"] for r in h] == [0, 1, 2, 3] and steps == [1, 2, 3]
    _assert_pinned(h, PINNED_ONE_SEED)


def test_rl_train_reproduces_its_pinned_numbers_on_seeds_stepping_together():
    hs, steps = _pinned_run(seeds=[2, 5])
    assert hs.seeds == (2, 5) and [h.seed for h in hs] == [2, 5] and steps == [1, 1, 2, 2, 3, 3]
    assert len(hs.policies) == 2
    _assert_pinned(hs[0], PINNED_ONE_SEED)
    _assert_pinned(hs[1], PINNED_SEED_5)
