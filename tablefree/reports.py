"""What the studies and tools report, marked as theirs: a Markdown report, a JSON report and a figure,
each starting with its command's mark (common.mark), so a later run replaces only its own."""

import json

from tablefree.common import mark


def markdown(command, text):
    return f"<!-- written by {mark(command)} -->\n{text}"


def json_report(command, data, indent=2, **dumps):
    return json.dumps({"written_by": mark(command), **data}, indent=indent, **dumps)


def png_metadata(command):
    return {"Software": mark(command)}  # matplotlib writes it as the chunk after IHDR


def pyplot():
    """matplotlib.pyplot drawing to files, or None (and a note) when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -r requirements-extras.txt)")
        return None
    return plt
