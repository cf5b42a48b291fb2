"""transformer-lab: small transformers composed as data x model x hardware with Hydra + Lightning."""

__version__ = "0.1.0"
