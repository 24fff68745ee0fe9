"""The plumbing the scripts share: the one user error and atomic outputs (common), settings
(configurator), devices, checkpoints, data, tokenizers, corpora and the ternary layers. Nothing
here is run directly."""
