"""tau2-bench's retail and airline domains on the benchmark's own data: `load_environment("tau2-retail")`.

`data` loads tau2's files (from the `[tau2]` extra's packages or a checkout), `retail` / `airline` hold the
tools, `reward` tau2's reward (DB, COMMUNICATE, NL assertions through a judge), `user` the LLM customer,
`env` tau2's protocol and its episode (played by `art_core.envs.tool_use`), `published` the leaderboard's reference figures.
"""
