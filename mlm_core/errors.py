"""Exception types whose messages are written for the learner who will read them in the UI."""


class MLMLabError(Exception):
    """Base class: a problem MLM Lab can explain in plain words (pages show ``str(exc)``)."""


class InputError(MLMLabError, ValueError):
    """Bad user input: empty text, an unreadable upload, impossible rates."""


class ModelLoadError(MLMLabError):
    """A model or tokenizer could not be loaded; the message lists what is available offline."""
