"""Prefect flows: train, evaluate, deploy, retrain (and the demo). Each reads like its loop; the work is in tasks/."""
