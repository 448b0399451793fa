"""Prefect flows: train, evaluate, deploy, retrain (and the demos). Each reads like its loop; the work is in tasks/.

Installed as `art_pipeline.flows` (see art_pipeline/__init__.py): import the flows by that name,
`from art_pipeline.flows.train import train`. From the repository's root, `python -m flows.train` runs the same
file.
"""
