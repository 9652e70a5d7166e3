"""Exception types shared by every layer; each names the thing and the reason."""


class Wamdiff2Error(Exception):
    """Base class of every error this package raises on purpose."""


class InputError(Wamdiff2Error, ValueError):
    """An input (image, message, state, prompt) is malformed or inconsistent."""


class ImageConversionError(InputError):
    """A sensor_msgs Image/CompressedImage cannot be converted to or from an array."""


class CheckpointError(Wamdiff2Error):
    """A checkpoint folder is missing, incomplete, corrupt or unsafe to load."""


class ParseError(Wamdiff2Error, ValueError):
    """Model output text does not parse into the expected answer."""
