"""What every tool-using environment shares (customer service, tau2, MCP, price lookup): the one episode loop
(`episode.run_episode`), tools as Python functions with their runner and OpenAI schemas (`tools`), and the
regex that forces a random-weight test model to write a well-formed tool call (`forced_calls`).
"""
