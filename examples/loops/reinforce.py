"""pytorch/examples' REINFORCE (``reinforcement_learning/reinforce.py``), in torch and in JAX.

The example's ``Policy`` (``Linear(4, 128) -> Dropout(0.6) -> relu ->
Linear(128, 2) -> softmax``) learns to balance a pole with the vanilla
policy gradient:

- each episode samples actions from ``Categorical(probs)``, one forward
  pass (with its own dropout mask) per time step;
- at the episode's end the discounted returns ``R_t = r_t + gamma R_{t+1}``
  (``gamma = 0.99``) are normalised, ``(R - mean(R)) / (std(R) + eps)``
  (unbiased std, ``eps`` float32's machine epsilon), and the loss
  ``sum_t -log pi(a_t | s_t) R_t`` takes one ``Adam(lr=1e-2)`` step.

One step is one episode. The environment is CartPole without gym:
:class:`CartPole` holds gym's ``CartPole-v1`` dynamics (Euler steps of
0.02 s, pole angle beyond 12 degrees or cart beyond 2.4 ends the episode,
500 steps at most, reward 1 per step) in NumPy float64, with its own NumPy
generator for the starting states, so both sides see the same states for the
same actions. All other randomness is torch's stream, in torch's order: the
policy's initial weights, then at each time step the dropout mask and the
action (``multinomial``'s exponential draws).

The JAX side runs each time step as one jitted function
(:func:`jax_impl.random.host_draws.jit_with_host_draws`: the dropout mask and
the action's exponentials are drawn on the host before the call, in torch's
order) that samples the action as ``Categorical(probs).sample()`` does
(:func:`jax_impl.random.staged.categorical`) and returns it with its
log-probability (``jax_impl.distributions.Categorical.log_prob``) and that
log-probability's gradient; at the episode's end the returns, the loss and the gradient
``sum_t -R_t grad log pi(a_t | s_t)`` (what torch's backward of the summed
loss accumulates) are formed on the host in the run's dtype. ``jax_impl.optim.adam``'s exact step updates the
parameters.

``python -m examples.loops.reinforce --framework torch|jax --out DIR --steps N --dtype float64``
records a run with ``parity.Recorder``.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from examples.loops.recording import kept, record, recorder

__all__ = ["CONFIG", "CartPole", "discounted_returns", "main", "train_jax", "train_torch"]

CONFIG = {"gamma": 0.99, "lr": 1e-2, "max_episode_steps": 500, "record_every": 10, "env_seed": 543}


class CartPole:
    """gym's ``CartPole-v1`` dynamics in NumPy float64 (``gymnasium/envs/classic_control/cartpole.py``).

    ``reset()`` draws the four state variables ``U(-0.05, 0.05)`` from the environment's own
    ``numpy.random.default_rng(seed)``; ``step(action)`` (0 pushes left, 1 right) returns
    ``(state, reward, terminated, truncated)``.
    """

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(self, seed: int, max_episode_steps: int = CONFIG["max_episode_steps"]) -> None:
        self.rng = np.random.default_rng(seed)
        self.max_episode_steps = max_episode_steps
        self.state = np.zeros(4)
        self.steps = 0

    def reset(self) -> np.ndarray:
        self.state = self.rng.uniform(-0.05, 0.05, 4)
        self.steps = 0
        return self.state.copy()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool]:
        x, x_dot, theta, theta_dot = (float(v) for v in self.state)
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        force = self.force_mag if action == 1 else -self.force_mag
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta**2 / total_mass))
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * xacc
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc
        self.state = np.array([x, x_dot, theta, theta_dot])
        self.steps += 1
        terminated = bool(x < -self.x_threshold or x > self.x_threshold
                          or theta < -self.theta_threshold_radians or theta > self.theta_threshold_radians)
        return self.state.copy(), 1.0, terminated, self.steps >= self.max_episode_steps


def discounted_returns(rewards: list[float], gamma: float) -> list[float]:
    """The example's ``R = r + gamma * R`` from the last reward back, in Python floats."""
    R, returns = 0.0, []
    for r in rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    return returns


def train_torch(folder: str | None = None, *, steps: int = 50, dtype: str = "float64", seed: int = 0,
                record_every: int = CONFIG["record_every"]) -> list[dict[str, Any]]:
    """The example's loop in torch for ``steps`` episodes; one history entry per episode.

    Each entry holds ``loss`` (the episode's policy loss), ``ep_reward``, ``running_reward`` and
    ``return_std`` (the unbiased std of the returns); every ``record_every`` episodes and the last add the
    policy's state dict as ``policy.<key>`` (numpy). With ``folder`` the same is recorded there with
    ``parity.Recorder`` (tensors every ``record_every`` episodes, Adam's state with them).
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.optim as optim
    from torch.distributions import Categorical

    class Policy(nn.Module):
        """The example's ``Policy``."""

        def __init__(self):
            super().__init__()
            self.affine1 = nn.Linear(4, 128)
            self.dropout = nn.Dropout(p=0.6)
            self.affine2 = nn.Linear(128, 2)
            self.saved_log_probs = []
            self.rewards = []

        def forward(self, x):
            x = self.affine1(x)
            x = self.dropout(x)
            x = F.relu(x)
            action_scores = self.affine2(x)
            return F.softmax(action_scores, dim=1)

    torch_dtype = getattr(torch, dtype)
    env = CartPole(CONFIG["env_seed"] + seed)
    torch.manual_seed(seed)
    policy = Policy().to(torch_dtype)
    optimizer = optim.Adam(policy.parameters(), lr=CONFIG["lr"])
    eps = np.finfo(np.float32).eps.item()

    def select_action(state):
        state = torch.from_numpy(state).to(torch_dtype).unsqueeze(0)
        probs = policy(state)
        m = Categorical(probs)
        action = m.sample()
        policy.saved_log_probs.append(m.log_prob(action))
        return action.item()

    def finish_episode():
        returns = torch.tensor(discounted_returns(policy.rewards, CONFIG["gamma"]), dtype=torch_dtype)
        std = returns.std()
        returns = (returns - returns.mean()) / (std + eps)
        policy_loss = [-log_prob * R for log_prob, R in zip(policy.saved_log_probs, returns)]
        optimizer.zero_grad()
        policy_loss = torch.cat(policy_loss).sum()
        policy_loss.backward()
        optimizer.step()
        del policy.rewards[:]
        del policy.saved_log_probs[:]
        return policy_loss.item(), std.item()

    records: list[dict[str, Any]] = []
    meta = {"example": "reinforce", "dtype": dtype, "seed": seed, "config": CONFIG}
    running_reward = 10.0
    with recorder(folder, "torch", meta, keep_every=record_every) as rec:
        for episode in range(steps):
            state, ep_reward = env.reset(), 0.0
            while True:
                action = select_action(state)
                state, reward, terminated, truncated = env.step(action)
                policy.rewards.append(reward)
                ep_reward += reward
                if terminated or truncated:
                    break
            running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
            loss, std = finish_episode()
            values: dict[str, Any] = {"loss": loss, "ep_reward": ep_reward, "running_reward": running_reward,
                                      "return_std": std}
            modules = None
            if kept(episode, steps, record_every):
                values["policy"] = {k: v.detach().numpy().copy() for k, v in policy.state_dict().items()}
                modules = {"policy": policy, "optimizer": optimizer}
            record(records, rec, episode, values, modules)
    return records


def _jax_policy_class():
    """``Policy`` on ``jax_impl.nn`` (defined on first use, so importing this module does not import jax)."""
    import jax_impl.nn as jnn
    import jax_impl.nn.functional as JF

    class Policy(jnn.Module):
        """The example's ``Policy``: the same layers, names, initial draws and dropout masks."""

        def __init__(self) -> None:
            self.affine1 = jnn.Linear(4, 128)
            self.dropout = jnn.Dropout(p=0.6)  # torch's masks, from jax_impl.random's global generator
            self.affine2 = jnn.Linear(128, 2)

        def __call__(self, x):
            x = self.affine1(x)
            x = self.dropout(x)
            x = JF.relu(x)
            return JF.softmax(self.affine2(x), dim=1)

    return Policy


def train_jax(folder: str | None = None, *, steps: int = 50, dtype: str = "float64", seed: int = 0,
              record_every: int = CONFIG["record_every"]) -> list[dict[str, Any]]:
    """The example's loop on ``jax_impl``: the history :func:`train_torch` gives, from JAX."""
    import jax

    with jax.enable_x64(dtype == "float64"):
        return _train_jax(folder, steps, dtype, seed, record_every)


def _train_jax(folder, steps, dtype, seed, record_every):
    import jax
    import jax.numpy as jnp
    from flax import nnx

    import jax_impl.distributions as jd
    import jax_impl.optim
    import jax_impl.random as jr
    from jax_impl.random import staged
    from jax_impl.random.host_draws import jit_with_host_draws

    jdtype = jnp.dtype(dtype)
    np_dtype = np.dtype(dtype)
    env = CartPole(CONFIG["env_seed"] + seed)
    jr.manual_seed(seed)
    policy = _jax_policy_class()()
    graphdef, params = nnx.split(policy, nnx.Param)
    params = jax.tree.map(lambda p: p.astype(jdtype), params)
    tx = jax_impl.optim.adam(lr=CONFIG["lr"])
    opt_state = tx.init(params)
    eps = np.finfo(np.float32).eps.item()
    actions = jnp.arange(2).reshape(2, 1)

    def act(params, state):
        """The sampled action, ``log pi(action | state)`` and its gradient (one forward, one dropout mask).

        Both actions' log-probabilities come out of one reverse pass, and the sampled action picks its own:
        the action is drawn inside the call, so the host reads one int, one float and one gradient per
        time step instead of sampling in eager jax.
        """

        def log_probs(p):
            m = jd.Categorical(nnx.merge(graphdef, p)(state))
            lps = m.log_prob(actions)[:, 0]
            return lps, (m.probs, lps)

        jac, (probs, lps) = jax.jacrev(log_probs, has_aux=True)(params)
        action = staged.categorical(probs)[0]  # torch.multinomial(probs, 1): exponentials drawn after the mask
        return action, lps[action], jax.tree.map(lambda g: g[action], jac)

    act_step = jit_with_host_draws(act, key_argnums=(1,))
    adam_step = jax.jit(tx.step)

    records: list[dict[str, Any]] = []
    meta = {"example": "reinforce", "dtype": dtype, "seed": seed, "config": CONFIG}
    running_reward = 10.0
    with recorder(folder, "jax", meta, keep_every=record_every) as rec:
        for episode in range(steps):
            state, ep_reward = env.reset(), 0.0
            rewards, log_probs, grads = [], [], []
            while True:
                # NumPy in, `.item()` out, as torch's `from_numpy(state).unsqueeze(0)` and `action.item()`:
                # jax's eager indexing (`[None]`, `[0]`) dispatches a computation each, slower than the step.
                action, log_prob, grad = act_step(params, state.astype(np_dtype)[None])
                action = action.item()
                log_probs.append(np.asarray(log_prob))
                grads.append(jax.tree.map(np.asarray, grad))
                state, reward, terminated, truncated = env.step(action)
                rewards.append(reward)
                ep_reward += reward
                if terminated or truncated:
                    break
            running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
            # The episode's end on the host in the run's dtype (a jitted version would compile for every
            # episode length): normalised returns, the loss, and the gradient torch's backward accumulates,
            # each step's graph receiving d loss / d log_prob_t = -R_t.
            returns = np.asarray(discounted_returns(rewards, CONFIG["gamma"]), np_dtype)
            std = returns.std(ddof=1)
            returns = (returns - returns.mean()) / (std + np_dtype.type(eps))
            loss = np.sum(np.stack([-lp * R for lp, R in zip(log_probs, returns)]))
            episode_grad = jax.tree.map(lambda *gs: sum(-R * g for R, g in zip(returns, gs)), *grads)
            params, opt_state = adam_step(episode_grad, opt_state, params)
            values: dict[str, Any] = {"loss": float(loss), "ep_reward": ep_reward, "running_reward": running_reward,
                                      "return_std": float(std)}
            modules = None
            if kept(episode, steps, record_every):
                nnx.update(policy, params)
                values["policy"] = {".".join(map(str, path)): np.asarray(var[...])
                                    for path, var in nnx.to_flat_state(params)}
                modules = {"policy": policy}
                if rec is not None:  # Adam's state under torch's state_dict names
                    import parity

                    modules["optimizer"] = parity.optimizer_record(
                        opt_state, params, name="Adam", hyperparameters={"lr": CONFIG["lr"]},
                        param_names=[f"{layer}.{p}" for layer in ("affine1", "affine2") for p in ("weight", "bias")])
            record(records, rec, episode, values, modules)
    return records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("torch", "jax"), required=True)
    parser.add_argument("--out", required=True, help="the run's folder (parity.Recorder)")
    parser.add_argument("--steps", type=int, default=50, help="episodes")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    train = train_torch if args.framework == "torch" else train_jax
    records = train(args.out, steps=args.steps, dtype=args.dtype, seed=args.seed)
    last = records[-1]
    print(f"{args.framework}: {len(records)} episodes, last reward {last['ep_reward']:.0f}, "
          f"running reward {last['running_reward']:.2f}")


if __name__ == "__main__":
    main()
