"""Customer service in the style of tau-bench, on domains we generate from a seed: what a domain provides
(`domain`: database, tools, customer scenarios, policy, reward), the environment over any such domain
(`env.CustomerServiceEnv`, its episode played by `art_core.envs.tool_use`) and the customer simulators (`users`).
The shipped domains are `art_core.envs.retail` and `art_core.envs.airline`; tau2-bench's own data is
`art_core.envs.tau2`.
"""
