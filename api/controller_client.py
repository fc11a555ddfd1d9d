from metalog.client import MSGPACK, ControllerClient, ControllerUnavailableError  # noqa: F401
