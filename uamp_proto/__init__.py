"""uamp_proto: the sans-IO core of UAMP."""
from .codec import DecodeError, decode, encode
__all__ = ["DecodeError", "decode", "encode"]
