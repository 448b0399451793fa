"""tau-bench-style customer service: what a domain provides (`domain`), the generic episode loop
(`episode.CustomerServiceEnv`), user simulators (`users`) and forced tool calls for test models
(`forced_calls`). The shipped domains are `art_core.envs.retail` and `art_core.envs.airline`.
"""
