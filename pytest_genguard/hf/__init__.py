"""The torch and transformers side: tiny models, recording, teacher-forced verification, fine-tuning and its cache
and pins, the recorder callback, model invariants.

Modules here import torch and transformers inside the functions that need them, so that importing them (as the
lazy public API and the plugin's fixtures do) stays cheap; they build on `pytest_genguard.core` and never import the
pytest plugin (`pytest_genguard.plugin`).
"""
