"Random property checks, naive references and gradient checks for `looprl.training.objectives`."
import math, statistics

import pytest
import torch
import torch.nn.functional as F

from looprl.training.objectives import (aggregate, categorical_kl, chunked_logsumexp, dppo_policy_loss,
                               entropy_from_logits, flow_dppo_halves, flow_dppo_policy_loss, gae, grpo_advantages,
                               masked_mean, masked_whiten, ppo_policy_loss, selected_logprobs, token_entropy, value_loss)
from looprl.bench.flow_kl import bench_flow_kl


def gen(seed): return torch.Generator().manual_seed(seed)


def right_padded_mask(N, T, g, min_len=1):
    lens = torch.randint(min_len, T + 1, (N,), generator=g)
    return (torch.arange(T)[None] < lens[:, None]), lens


# ---------------------------------------------------------------- GAE, GRPO, whitening, aggregation

def naive_gae(rewards, values, lens, gamma, lam):
    "O(T²) reference: A_t = Σ_k (γλ)^k δ_{t+k} over each sequence's own tokens."
    N, T = values.shape
    adv = torch.zeros(N, T, dtype=torch.float64)
    for i in range(N):
        L = int(lens[i])
        V = [float(values[i, t]) for t in range(L)] + [0.0]
        r = [0.0] * L
        if L: r[L - 1] = float(rewards[i])
        delta = [r[t] + gamma * V[t + 1] - V[t] for t in range(L)]
        for t in range(L):
            adv[i, t] = sum((gamma * lam) ** k * delta[t + k] for k in range(L - t))
    return adv


@pytest.mark.parametrize("seed", range(6))
def test_gae_matches_naive_sum(seed):
    g = gen(seed)
    N, T = 5, 17
    mask, lens = right_padded_mask(N, T, g, min_len=0)
    values = torch.randn(N, T, generator=g, dtype=torch.float64)
    values[~mask] = float("nan")                            # padding garbage must not matter
    rewards = torch.randint(0, 2, (N,), generator=g).double()
    gamma, lam = [(1.0, 0.95), (0.99, 0.9), (0.9, 1.0), (1.0, 0.0), (0.5, 0.5), (1.0, 1.0)][seed]
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam)
    want = naive_gae(rewards, values, lens, gamma, lam)
    torch.testing.assert_close(adv, want)
    torch.testing.assert_close(ret, torch.where(mask, want + values, torch.zeros((), dtype=torch.float64)))
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()


def test_gae_lambda_one_gamma_one_is_monte_carlo():
    g = gen(11)
    mask, lens = right_padded_mask(6, 9, g)
    values, rewards = torch.randn(6, 9, generator=g), torch.rand(6, generator=g)
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    torch.testing.assert_close(ret, torch.where(mask, rewards[:, None].expand(6, 9), torch.zeros(())))


def test_gae_does_not_track_gradients_of_values():
    v = torch.randn(2, 3, requires_grad=True)
    adv, ret = gae(torch.ones(2), v, torch.ones(2, 3))
    assert not adv.requires_grad and not ret.requires_grad


def test_gae_errors():
    with pytest.raises(ValueError, match="right-padded"): gae(torch.ones(1), torch.zeros(1, 3), torch.tensor([[0, 1, 1]]))
    with pytest.raises(ValueError, match="rewards must be"): gae(torch.ones(2), torch.zeros(1, 3), torch.ones(1, 3))
    with pytest.raises(ValueError, match="NaN or inf"): gae(torch.tensor([math.inf]), torch.zeros(1, 3), torch.ones(1, 3))


@pytest.mark.parametrize("G", [2, 3, 4, 8])
def test_grpo_matches_statistics_module(G):
    g = gen(G)
    r = torch.randint(0, 3, (G * 5,), generator=g).double() / 2
    A = grpo_advantages(r, G)
    for k in range(5):
        grp = [float(x) for x in r[k * G:(k + 1) * G]]
        if len(set(grp)) == 1:
            assert (A[k * G:(k + 1) * G] == 0).all()
            continue
        mu, sd = statistics.mean(grp), statistics.stdev(grp)
        torch.testing.assert_close(A[k * G:(k + 1) * G], torch.tensor([(x - mu) / (sd + 1e-6) for x in grp], dtype=torch.float64))


def test_grpo_equal_groups_exactly_zero_for_awkward_values():
    for v in (0.1, 1 / 3, 0.7, -2.5, 1e-9):
        for dt in (torch.float32, torch.float64):
            assert (grpo_advantages(torch.full((6,), v, dtype=dt), 3) == 0).all()


def test_grpo_errors():
    with pytest.raises(ValueError, match="GRPO needs at least 2 completions per prompt"): grpo_advantages(torch.ones(4), 1)
    with pytest.raises(ValueError, match="GRPO needs at least 2 completions per prompt"): grpo_advantages(torch.ones(4), 0)
    with pytest.raises(ValueError, match="whole number"): grpo_advantages(torch.ones(5), 2)
    with pytest.raises(ValueError, match="NaN"): grpo_advantages(torch.tensor([1.0, math.nan]), 2)


def test_whiten_statistics_and_padding_independence():
    g = gen(3)
    mask, _ = right_padded_mask(7, 11, g)
    x = torch.randn(7, 11, generator=g, dtype=torch.float64) * 3 + 5
    w = masked_whiten(x, mask)
    vals = w[mask]
    assert abs(float(vals.mean())) < 1e-12
    assert abs(float(vals.std(unbiased=True)) - 1) < 1e-7                # unbiased, like the anchor
    assert (w[~mask] == 0).all()
    x2 = x.clone(); x2[~mask] = math.nan
    torch.testing.assert_close(masked_whiten(x2, mask), w)
    torch.testing.assert_close(masked_whiten(x, mask, shift_mean=False)[mask], vals + x[mask].mean())
    one = masked_whiten(torch.tensor([[3.0, 9.0]]), torch.tensor([[1, 0]]))   # a single token: no Bessel correction
    assert float(one[0, 0]) == 0.0


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "token-mean"])
def test_aggregate_matches_loops(mode):
    g = gen(5)
    mask, lens = right_padded_mask(6, 8, g, min_len=0)
    x = torch.randn(6, 8, generator=g, dtype=torch.float64)
    if mode == "token-mean":
        want = sum(float(x[i, :int(lens[i])].sum()) for i in range(6)) / max(int(lens.sum()), 1)
    else:
        want = sum(float(x[i, :int(lens[i])].sum()) / max(int(lens[i]), 1) for i in range(6)) / 6
    assert abs(float(aggregate(x, mask, mode)) - want) < 1e-12
    assert abs(float(aggregate(x, mask.float(), mode)) - want) < 1e-12    # float masks behave like bool ones


# ---------------------------------------------------------------- chunked vocabulary arithmetic

CHUNKS = [1, 7, 64, 100, 101, 1000, None]


@pytest.mark.parametrize("cs", CHUNKS)
def test_chunked_functions_match_full_references(cs):
    g = gen(7)
    z = torch.randn(3, 4, 100, generator=g, dtype=torch.float64) * 4
    old = torch.log_softmax(torch.randn(3, 4, 100, generator=g, dtype=torch.float64) * 4, -1)
    a = torch.randint(0, 100, (3, 4), generator=g)
    torch.testing.assert_close(chunked_logsumexp(z, cs), torch.logsumexp(z, -1))
    ref_lp = torch.log_softmax(z, -1)
    torch.testing.assert_close(selected_logprobs(z, a, cs), ref_lp.gather(-1, a[..., None])[..., 0])
    torch.testing.assert_close(categorical_kl(old, z, cs), F.kl_div(ref_lp, old, log_target=True, reduction="none").sum(-1))
    torch.testing.assert_close(token_entropy(z, cs), -(ref_lp.exp() * ref_lp).sum(-1))


@pytest.mark.parametrize("cs", CHUNKS)
def test_selected_logprobs_gradient_matches_autograd(cs):
    g = gen(8)
    z1 = (torch.randn(2, 5, 100, generator=g, dtype=torch.float64) * 3).requires_grad_()
    z2 = z1.detach().clone().requires_grad_()
    a = torch.randint(0, 100, (2, 5), generator=g)
    w = torch.randn(2, 5, generator=g, dtype=torch.float64)
    (selected_logprobs(z1, a, cs) * w).sum().backward()
    (torch.log_softmax(z2, -1).gather(-1, a[..., None])[..., 0] * w).sum().backward()
    torch.testing.assert_close(z1.grad, z2.grad)


def test_gradcheck_selected_logprobs():
    g = gen(9)
    z = torch.randn(2, 3, 11, generator=g, dtype=torch.float64, requires_grad=True)
    a = torch.randint(0, 11, (2, 3), generator=g)
    assert torch.autograd.gradcheck(lambda t: selected_logprobs(t, a, 4), (z,))


def test_fp16_logits():
    g = gen(10)
    z = (torch.randn(2, 3, 50, generator=g) * 3).half().requires_grad_()
    a = torch.randint(0, 50, (2, 3), generator=g)
    lp = selected_logprobs(z, a, 16)
    assert lp.dtype == torch.float32
    ref = torch.log_softmax(z.detach().float(), -1).gather(-1, a[..., None])[..., 0]
    torch.testing.assert_close(lp, ref)
    lp.sum().backward()
    assert z.grad.dtype == torch.float16
    zf = z.detach().float().requires_grad_()
    torch.log_softmax(zf, -1).gather(-1, a[..., None]).sum().backward()
    torch.testing.assert_close(z.grad.float(), zf.grad, atol=2e-3, rtol=0)


def test_kl_with_masked_vocabulary_is_finite_and_exact():
    g = gen(12)
    N, T, V = 3, 5, 40
    logits = torch.randn(N, T, V, generator=g, dtype=torch.float64)
    old_logits = torch.randn(N, T, V, generator=g, dtype=torch.float64)
    banned = torch.rand(N, T, V, generator=g) < 0.5
    banned[..., 0] = False
    old = torch.log_softmax(old_logits.masked_fill(banned, -math.inf), -1)     # p_old = 0 on half of the vocabulary
    kl = categorical_kl(old, logits, 7)
    p, logq = old.exp(), torch.log_softmax(logits, -1)
    want = torch.where(p > 0, p * (old - logq), torch.zeros((), dtype=torch.float64)).sum(-1)
    assert torch.isfinite(kl).all()
    torch.testing.assert_close(kl, want)
    naive = (old.exp() * (old - logq)).sum(-1)
    assert torch.isnan(naive).all()                                          # the anchor's formula


def test_kl_is_nonnegative_and_zero_on_identity():
    g = gen(13)
    z = torch.randn(4, 6, 30, generator=g) * 5
    assert (categorical_kl(torch.log_softmax(z, -1), z, 8) >= 0).all()
    assert (categorical_kl(torch.log_softmax(z, -1), z, 8) < 1e-5).all()


# ---------------------------------------------------------------- policy and value losses

def random_batch(seed, N=4, T=6, dtype=torch.float64):
    g = gen(seed)
    mask, _ = right_padded_mask(N, T, g)
    logp_old = torch.log(torch.rand(N, T, generator=g, dtype=dtype) * 0.9 + 0.05)
    logp = logp_old + torch.randn(N, T, generator=g, dtype=dtype) * 0.4
    A = torch.randn(N, T, generator=g, dtype=dtype)
    return logp, logp_old, A, mask


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "token-mean"])
def test_ppo_matches_formula_and_gradcheck(agg):
    logp, logp_old, A, mask = random_batch(20)
    r = (logp - logp_old).exp()
    want_tok = torch.maximum(-r * A, -r.clamp(0.8, 1.2) * A)
    loss, met = ppo_policy_loss(logp, logp_old, A, mask, agg=agg)
    torch.testing.assert_close(loss, aggregate(want_tok, mask, agg))
    assert met["clipfrac"] == pytest.approx(float(((-r.clamp(0.8, 1.2) * A > -r * A) & mask).sum() / mask.sum()))
    x = logp.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: ppo_policy_loss(t, logp_old, A, mask, agg=agg)[0], (x,))


def test_asymmetric_clip():
    lp_old = torch.zeros(1, 2)
    lp = torch.log(torch.tensor([[1.25, 0.75]]))
    loss, met = ppo_policy_loss(lp, lp_old, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), clip_low=0.1, clip_high=0.3)
    # token 0: r = 1.25 < 1.3 unclipped → −1.25; token 1: r = 0.75 < 0.9 → clipped at 0.9 → max(0.75, 0.9) = 0.9
    assert float(loss) == pytest.approx((-1.25 + 0.9) / 2) and met["clipfrac"] == 0.5


def test_dppo_matches_formula_and_gradcheck():
    logp, logp_prox, A, mask = random_batch(21)
    logp_b = logp_prox + torch.randn(logp.shape, generator=gen(22), dtype=torch.float64)
    r = (logp - logp_prox).exp()
    w = (logp_prox - logp_b).exp().clamp(0.5, 2.0)
    want = aggregate(torch.maximum(-r * A, -r.clamp(0.8, 1.2) * A) * w, mask)
    loss, met = dppo_policy_loss(logp, logp_prox, logp_b, A, mask)
    torch.testing.assert_close(loss, want)
    assert met["dppo_w_mean"] == pytest.approx(float(masked_mean(w, mask)))
    x = logp.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: dppo_policy_loss(t, logp_prox, logp_b, A, mask)[0], (x,))
    # proximal == behaviour: DPPO reduces to PPO against the behaviour policy
    torch.testing.assert_close(dppo_policy_loss(logp, logp_b, logp_b, A, mask)[0], ppo_policy_loss(logp, logp_b, A, mask)[0])
    with pytest.raises(ValueError, match="logp_prox"): dppo_policy_loss(logp, None, logp_b, A, mask)
    with pytest.raises(ValueError, match="logp_behaviour"): dppo_policy_loss(logp, logp_prox, None, A, mask)


def test_value_loss_matches_formula_and_gradcheck():
    g = gen(23)
    mask, _ = right_padded_mask(4, 6, g)
    v_old = torch.randn(4, 6, generator=g, dtype=torch.float64)
    v = v_old + torch.randn(4, 6, generator=g, dtype=torch.float64) * 0.4
    R = torch.randn(4, 6, generator=g, dtype=torch.float64)
    vc = v_old + (v - v_old).clamp(-0.2, 0.2)
    want = aggregate(torch.maximum((vc - R) ** 2, (v - R) ** 2), mask)
    loss, met = value_loss(v, v_old, R, mask)
    torch.testing.assert_close(loss, want)
    assert met["value_clipfrac"] == pytest.approx(float((((v - v_old).abs() > 0.2) & mask).sum() / mask.sum()))
    x = v.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: value_loss(t, v_old, R, mask)[0], (x,))


@pytest.mark.parametrize("fn", ["ppo", "dppo", "value", "flow"])
def test_padding_garbage_never_leaks(fn):
    g = gen(30)
    N, T, V = 3, 5, 9
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]]).bool()
    def run(garbage):
        x = torch.randn(N, T, generator=gen(31), dtype=torch.float64)
        y = torch.randn(N, T, generator=gen(32), dtype=torch.float64)
        A = torch.randn(N, T, generator=gen(33), dtype=torch.float64)
        if garbage is not None:
            y = y.masked_fill(~mask, garbage); A = A.masked_fill(~mask, garbage)
        if fn == "flow":
            z = torch.randn(N, T, V, generator=gen(34), dtype=torch.float64)
            old = torch.log_softmax(torch.randn(N, T, V, generator=gen(35), dtype=torch.float64), -1)
            if garbage is not None: old = old.masked_fill(~mask[..., None], garbage)
            z = z.requires_grad_()
            loss, met = flow_dppo_policy_loss(z, old, torch.zeros(N, T, dtype=torch.long), A, mask, budget=0.05, chunk_size=4)
        else:
            z = x.clone().requires_grad_()
            if fn == "ppo": loss, met = ppo_policy_loss(z, y, A, mask)
            elif fn == "dppo": loss, met = dppo_policy_loss(z, y, y.masked_fill(~mask, 0) if garbage is None else y, A, mask)
            else: loss, met = value_loss(z, y, A, mask)
        loss.backward()
        return loss.detach(), z.grad, met
    clean = run(None)
    for garbage in (math.nan, math.inf, -math.inf):
        dirty = run(garbage)
        torch.testing.assert_close(dirty[0], clean[0])
        torch.testing.assert_close(dirty[1], clean[1])
        assert all(math.isfinite(v) for v in dirty[2].values()), dirty[2]


def test_equal_rewards_zero_gradient_for_every_policy_loss():
    g = gen(40)
    N, T, V = 4, 5, 7
    mask, _ = right_padded_mask(N, T, g)
    A = grpo_advantages(torch.tensor([1., 1., 1., 1.]), 4)
    lp = torch.randn(N, T, generator=g).requires_grad_()
    other = torch.randn(N, T, generator=g)
    for loss, _ in (ppo_policy_loss(lp, other, A, mask), dppo_policy_loss(lp, other, other * 1.1, A, mask)):
        lp.grad = None
        loss.backward()
        assert loss.item() == 0.0 and (lp.grad == 0).all()
    z = torch.randn(N, T, V, generator=g).requires_grad_()
    loss, _ = flow_dppo_policy_loss(z, torch.log_softmax(torch.randn(N, T, V, generator=g), -1), torch.zeros(N, T, dtype=torch.long), A, mask)
    loss.backward()
    assert loss.item() == 0.0 and (z.grad == 0).all()


# ---------------------------------------------------------------- Flow-DPPO gate

def flow_reference(z, old, actions, A, mask, budget):
    "Independent reference: per-token blocked flags from full log-softmax (finite inputs only)."
    logq = torch.log_softmax(z.detach(), -1)
    kl = (old.exp() * (old - logq)).sum(-1).clamp_min(0)
    lr = logq.gather(-1, actions[..., None])[..., 0] - old.gather(-1, actions[..., None])[..., 0]
    outward = ((A > 0) & (lr > 0)) | ((A < 0) & (lr < 0))
    return outward & (kl > budget) & mask, outward, kl, lr


@pytest.mark.parametrize("seed", range(5))
def test_flow_gate_blocks_exactly_outward_tokens_over_budget(seed):
    g = gen(50 + seed)
    N, T, V = 8, 10, 13
    mask, _ = right_padded_mask(N, T, g)
    old = torch.log_softmax(torch.randn(N, T, V, generator=g, dtype=torch.float64) * 2, -1)
    z = (old + torch.randn(N, T, V, generator=g, dtype=torch.float64) * 0.6 * torch.rand(N, T, 1, generator=g, dtype=torch.float64)).requires_grad_()
    actions = torch.randint(0, V, (N, T), generator=g)
    A = torch.randn(N, T, generator=g, dtype=torch.float64)
    budget = 0.01
    blocked, outward, kl, lr = flow_reference(z, old, actions, A, mask, budget)
    assert blocked.any() and (mask & ~blocked).any()
    loss, met = flow_dppo_policy_loss(z, old, actions, A, mask, budget=budget, chunk_size=5)
    loss.backward()
    token_grad_norm = z.grad.abs().sum(-1)
    assert (token_grad_norm[blocked] == 0).all()                       # blocked: exactly zero
    assert (token_grad_norm[mask & ~blocked] > 0).all()                # every other valid token is live
    assert (token_grad_norm[~mask] == 0).all()
    assert met["blocked_frac"] == pytest.approx(float(blocked.sum() / mask.sum()))
    inward_over = mask & ~outward & (kl > budget)
    assert met["inward_over_budget_frac"] == pytest.approx(float(inward_over.sum() / mask.sum()))
    # the loss value keeps the blocked tokens' contribution: −ρA on every token
    torch.testing.assert_close(loss, aggregate(-lr.exp() * A, mask))
    # the gradient equals that of the live tokens' surrogate, computed with a full log-softmax
    x = z.detach().clone().requires_grad_()
    lr_x = torch.log_softmax(x, -1).gather(-1, actions[..., None])[..., 0] - old.gather(-1, actions[..., None])[..., 0]
    aggregate(torch.where(blocked, torch.zeros((), dtype=x.dtype), -lr_x.exp() * A), mask).backward()
    torch.testing.assert_close(z.grad, x.grad)


def test_gradcheck_flow_loss_without_gate():
    "Finite differences see the loss value, which a stop-gradient does not change: check the live path (no token blocked)."
    g = gen(59)
    old = torch.log_softmax(torch.randn(2, 3, 7, generator=g, dtype=torch.float64), -1)
    z = (old + 0.5 * torch.randn(2, 3, 7, generator=g, dtype=torch.float64)).requires_grad_()
    a = torch.randint(0, 7, (2, 3), generator=g)
    A = torch.randn(2, 3, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    assert torch.autograd.gradcheck(lambda t: flow_dppo_policy_loss(t, old, a, A, mask, budget=math.inf, chunk_size=3)[0], (z,))


def test_flow_first_step_is_vanilla_policy_gradient():
    "With π_θ = π_old the KL is 0, nothing is blocked, and ∂ℓ/∂z = −A (e_a − q) per token."
    g = gen(60)
    N, T, V = 2, 3, 6
    z = torch.randn(N, T, V, generator=g, dtype=torch.float64, requires_grad=True)
    old = torch.log_softmax(z.detach(), -1)
    a = torch.randint(0, V, (N, T), generator=g)
    A = torch.randn(N, T, generator=g, dtype=torch.float64)
    loss, met = flow_dppo_policy_loss(z, old, a, A, torch.ones(N, T), agg="token-mean")
    loss.backward()
    q = old.exp()
    want = -A[..., None] * (F.one_hot(a, V).double() - q) / (N * T)
    torch.testing.assert_close(z.grad, want)
    assert met["blocked_frac"] == 0.0 and met["categorical_kl"] < 1e-12


def test_flow_infinite_budget_is_unclipped_surrogate():
    g = gen(61)
    z = torch.randn(2, 4, 8, generator=g, dtype=torch.float64, requires_grad=True)
    old = torch.log_softmax(torch.randn(2, 4, 8, generator=g, dtype=torch.float64), -1)
    a = torch.randint(0, 8, (2, 4), generator=g)
    A = torch.randn(2, 4, generator=g, dtype=torch.float64)
    loss, met = flow_dppo_policy_loss(z, old, a, A, torch.ones(2, 4), budget=math.inf)
    lr = torch.log_softmax(z, -1).gather(-1, a[..., None])[..., 0] - old.gather(-1, a[..., None])[..., 0]
    torch.testing.assert_close(loss, aggregate(-lr.exp() * A, torch.ones(2, 4)))
    assert met["blocked_frac"] == 0.0


def test_flow_nan_kl_blocks_outward_and_keeps_inward():
    V = 5
    old = torch.log_softmax(torch.zeros(1, 2, V, dtype=torch.float64), -1).clone()
    old[..., 3] = math.nan
    z = torch.log(torch.tensor([0.5, 0.125, 0.125, 0.125, 0.125], dtype=torch.float64)).expand(1, 2, V).clone().requires_grad_()
    a = torch.tensor([[0, 0]])                                           # log ρ = ln(0.5/0.2) > 0
    A = torch.tensor([[1.0, -1.0]], dtype=torch.float64)                 # outward, inward
    loss, met = flow_dppo_policy_loss(z, old, a, A, torch.ones(1, 2), budget=1e9)
    loss.backward()
    assert (z.grad[0, 0] == 0).all() and (z.grad[0, 1] != 0).any()
    assert met["blocked_frac"] == 0.5 and met["inward_over_budget_frac"] == 0.5 and met["kl_nonfinite_frac"] == 1.0
    assert math.isfinite(loss.item())


def test_flow_inputs_checked():
    z = torch.zeros(1, 2, 3, requires_grad=True)
    with pytest.raises(ValueError, match="old_logprobs is None"):
        flow_dppo_policy_loss(z, None, torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2), torch.ones(1, 2))
    with pytest.raises(ValueError, match="do not match"):
        flow_dppo_policy_loss(z, torch.zeros(1, 2, 4), torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2), torch.ones(1, 2))
    with pytest.raises(ValueError, match="do not match"):
        selected_logprobs(z, torch.zeros(1, 3, dtype=torch.long))


def test_entropy_metric():
    z = torch.zeros(2, 3, 8)
    assert float(entropy_from_logits(z, torch.ones(2, 3), 3)) == pytest.approx(math.log(8))


@pytest.mark.parametrize("n", [2, 4, 6, 16, 64, 130])
def test_halves_disjoint_and_cover(n):
    a, b = flow_dppo_halves(n)
    assert len(a) == len(b) == n // 2
    assert not set(a) & set(b) and sorted(a + b) == list(range(n))


@pytest.mark.parametrize("n", [-2, 0, 1, 3, 9])
def test_halves_need_an_even_batch(n):
    with pytest.raises(ValueError, match="even"): flow_dppo_halves(n)


# ---------------------------------------------------------------- memory

def test_chunked_kl_memory_follows_chunk_not_vocabulary():
    small = bench_flow_kl(vocab=8192, tokens=8, chunk_sizes=(512, 2048, None), repeats=1, threads=1)
    large = bench_flow_kl(vocab=65536, tokens=8, chunk_sizes=(512, 2048, None), repeats=1, threads=1)
    ps = {r["chunk_size"]: r["peak_extra_bytes"] for r in small["rows"]}
    pl = {r["chunk_size"]: r["peak_extra_bytes"] for r in large["rows"]}
    for cs in (512, 2048):
        assert ps[cs] > 0 and pl[cs] <= 1.25 * ps[cs]
        assert pl[cs] <= 2.5 * 8 * cs * 4                               # 2¼ [tokens, chunk] FP32 temporaries at a time
    assert pl[None] >= 2 * 8 * 65536 * 4                                # unchunked: several [tokens, vocab] tensors
    assert ps[2048] >= 3 * ps[512]
