"""Package marker: resources are read with importlib.resources."""
