"""The plumbing the scripts share: errors, files, config parsing, devices, checkpoints, data,
tokenizers, corpora and the ternary layers. Nothing here is run directly."""
