"""The hub datasets' text (corpus.HUB: FineWeb-Edu, Cosmopedia), streamed row by row through the
datasets package, which only a hub dataset imports."""

from tablefree.common import UserError


def hub_texts(names, hub, data_files=None):
    """Stream the text of hub datasets (names, each hub's (path, config)), interleaved row by row;
    never downloads a dataset whole. data_files reads local JSON/Parquet files of the same schema
    through the same code (tests)."""
    try:
        import datasets
    except ImportError:
        raise UserError("hub datasets need the `datasets` package: pip install datasets") from None
    streams = []
    try:
        for name in names:
            if data_files:
                builder = "parquet" if str(data_files).endswith(".parquet") else "json"
                streams.append(iter(datasets.load_dataset(builder, data_files=str(data_files), split="train",
                                                          streaming=True)))
            else:
                path, config = hub[name]
                streams.append(iter(datasets.load_dataset(path, config, split="train", streaming=True)))
        while streams:  # round-robin over the datasets until all are exhausted
            for stream in list(streams):
                row = next(stream, None)
                if row is None:
                    streams.remove(stream)
                else:
                    yield row["text"]
    except OSError as e:  # offline, a proxy, a dataset gone: the hub's and requests' errors are all OSErrors
        where = data_files or "the Hugging Face hub"
        raise UserError(f"cannot read {', '.join(names)} from {where} ({type(e).__name__}: {str(e)[:160]}); nothing was "
                        f"written: reach the hub (the network, HF_HUB_OFFLINE unset), or give local files of its "
                        f"schema with --hub_data_files") from None
