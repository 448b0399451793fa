"""tau2-bench's retail and airline domains on the benchmark's own data: `load_environment("tau2-retail")`.

`data` loads tau2's files (from the `[tau2]` extra's packages or a checkout), `retail` / `airline` hold the
tools, `reward` tau2's reward (DB, COMMUNICATE, NL assertions through a judge), `user` the LLM customer,
`env` the episode loop and tau2's protocol, `published` the leaderboard's reference figures.
"""
