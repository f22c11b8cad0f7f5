"""portcheck's own version: the tool's, apart from the distribution that ships it (``inkling-kernels``).
It moves when portcheck's reports, exit codes or CPU mode change in a way a user sees."""

__version__ = "0.2.0"
