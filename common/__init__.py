"""qcdoctor: diagnose J6 training-to-deployment consistency problems."""

__version__ = "0.1.0"
