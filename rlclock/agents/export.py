"""Turn a stable-baselines3 PPO policy into plain numpy weights (:class:`~rlclock.policy.PolicyWeights`)."""

from __future__ import annotations

import numpy as np

from rlclock.errors import CheckpointError
from rlclock.policy import PolicyWeights


def weights_from_sb3(model) -> PolicyWeights:
    """The policy network of an SB3 ``PPO("MlpPolicy")`` (flatten → Linear/activation stack → action head)."""
    import torch

    policy = model.policy
    net = policy.mlp_extractor.policy_net
    hidden = []
    activation = None
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            hidden.append(
                (
                    layer.weight.detach().cpu().numpy().astype(np.float64),
                    layer.bias.detach().cpu().numpy().astype(np.float64),
                )
            )
        elif isinstance(layer, torch.nn.Tanh):
            activation = "tanh"
        elif isinstance(layer, torch.nn.ReLU):
            activation = "relu"
        else:
            raise CheckpointError(f"cannot export policy layer {type(layer).__name__}; use Linear with Tanh or ReLU.")
    head = policy.action_net
    if not isinstance(head, torch.nn.Linear):
        raise CheckpointError("the policy's action head is not a Linear layer (a Discrete action space is expected).")
    return PolicyWeights(
        tuple(hidden),
        (head.weight.detach().cpu().numpy().astype(np.float64), head.bias.detach().cpu().numpy().astype(np.float64)),
        activation or "tanh",
    )
