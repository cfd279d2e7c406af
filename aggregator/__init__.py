"""The cloud side: training jobs driving the algorithms over the fleet in rounds, model registry, API."""
